/* termtext.h: text the REPL did not write itself (what a statement printed, a mod's log, a
 * console's answers) put on the user's terminal so that it shows its control characters
 * instead of obeying them. */
#ifndef KCMD_TERMTEXT_H
#define KCMD_TERMTEXT_H

#include <stdbool.h>
#include <stdio.h>

#include <stddef.h>

/* The bytes of the control character at text (n bytes there): 1 for a C0 control other than
 * newline and tab, or DEL; 2 for a C1 control encoded in UTF-8 (0xC2 0x80-0x9F); 0 for
 * anything else. What kcmd_put_text shows as escapes, and completion refuses to insert. */
size_t kcmd_control_length(const char *text, size_t n);

/* Writes the len bytes of text (NUL bytes too) to out. To a terminal (tty true), a control
 * character other than newline and tab shows as a Lua escape (\27, \7, \0; \027 before a
 * digit), and so does a C1 control character encoded in UTF-8 (\194\155); colour sequences
 * (ESC [ digits and ; m) pass, so a game's coloured output keeps its colours. A mod's print
 * or a hostile console could otherwise retitle the window, move the cursor over what the
 * user reads, or write the clipboard. To anything else the bytes go as they are. */
void kcmd_put_text(FILE *out, const char *text, size_t len, bool tty);

#endif
