/* histfile.h: the REPL's history, kept in libedit's list and in a file (KILN_HISTORY, else
 * ~/.kiln_history) that holds every accepted line at once. Named apart from libedit's <history.h>. */
#ifndef KCMD_HISTFILE_H
#define KCMD_HISTFILE_H

/* Starts libedit's history and loads the file into it, dropping repeats (the file is then
 * rewritten without them). */
void kcmd_history_open(void);

/* Records an accepted line as the newest entry, in the list and the file, so a killed
 * session loses nothing. An empty line is not recorded; a repeat moves to the end. */
void kcmd_history_accept(const char *line);

/* Rewrites the file as the list and frees the list. */
void kcmd_history_close(void);

#endif
