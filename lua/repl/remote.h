/* remote.h: the kiln command as a client of a game's console over TCP: one line out, one
 * framed answer back. */
#ifndef KCMD_REMOTE_H
#define KCMD_REMOTE_H

#include <stdbool.h>

/* Connects to spec, "HOST:PORT" (the last colon splits them); the socket, or -1. */
int kcmd_remote_connect(const char *spec);

/* Sends line and a newline to the console on fd, then reads its answer frame
 * "<status> <len>\n<text>" into *status and *text (both malloc'd). False when the
 * connection is gone or the frame is malformed; nothing is allocated then. */
bool kcmd_remote_ask(int fd, const char *line, char **status, char **text);

#endif
