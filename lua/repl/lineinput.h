/* lineinput.h: how the REPL reads its lines: libedit with completion in a terminal, plain
 * reads from a pipe or file; Ctrl-C cancels the line being typed, never the REPL. */
#ifndef KCMD_LINEINPUT_H
#define KCMD_LINEINPUT_H

#include <stdbool.h>

#include "session.h"

typedef enum kcmd_read_status {
    KCMD_READ_LINE,      /* a line was read */
    KCMD_READ_CANCELLED, /* Ctrl-C while waiting or typing */
    KCMD_READ_END,       /* end of input */
    KCMD_READ_CLOSED     /* the console connection went while the prompt waited */
} kcmd_read_status;

/* Starts reading lines for session; in a terminal (tty) sets libedit up for UTF-8 input,
 * Ctrl-C and completion asked of the session. session must outlive kcmd_lineinput_close. */
void kcmd_lineinput_open(kcmd_session *session, bool tty);

/* Reads one line into *line (malloc'd; NULL unless KCMD_READ_LINE). With poll_watches the
 * console's watches print while the prompt waits. */
kcmd_read_status kcmd_lineinput_read(const char *prompt, bool poll_watches, char **line);

/* While :run steps the world: reads what stdin has (call it when stdin is readable); true
 * when the run should stop: an empty line, ":pause" or the end of input. Other lines are
 * ignored, and the user is told so. */
bool kcmd_lineinput_stop_running(void);

/* Frees what reading holds (pending plain input, completion candidates). */
void kcmd_lineinput_close(void);

#endif
