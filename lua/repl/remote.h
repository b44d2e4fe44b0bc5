/* remote.h: the kiln command as a client of a game's console over TCP: one line out, one
 * framed answer back. */
#ifndef KCMD_REMOTE_H
#define KCMD_REMOTE_H

#include <stdbool.h>
#include <stddef.h>

/* Connects to spec, "HOST:PORT" (the last colon splits them); the socket, or -1. */
int kcmd_remote_connect(const char *spec);

/* Signs in to the console on fd with token (sent first as "token TOKEN\n"); true when the
 * console accepts it. Otherwise false, with the console's reason (or why the connection
 * failed) in *why (malloc'd). */
bool kcmd_remote_login(int fd, const char *token, char **why);

/* The token for a console at spec ("HOST:PORT"): given (not NULL) is used as is, else the
 * first line of the token file the console wrote on this machine (see
 * kiln_console_default_token_path). NULL with a message in why (size bytes) when none. */
char *kcmd_remote_token(const char *spec, const char *given, char *why, size_t size);

/* Sends line and a newline to the console on fd, then reads its answer frame
 * "<status> <len>\n<text>" into *status and *text (both malloc'd; text NUL-terminated after
 * its *text_len bytes, which may hold NUL bytes). False when the connection is gone or the
 * frame is malformed; nothing is allocated then. */
bool kcmd_remote_ask(int fd, const char *line, char **status, char **text, size_t *text_len);

#endif
