/* termtext.c: text from statements, mods and consoles written to the user's terminal with
 * its control characters shown, not obeyed. */
#include "termtext.h"

#include <string.h>

size_t kcmd_control_length(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    if (n == 0) return 0;
    if ((s[0] < 0x20 && s[0] != '\n' && s[0] != '\t') || s[0] == 0x7f) return 1;
    if (s[0] == 0xc2 && n >= 2 && s[1] >= 0x80 && s[1] <= 0x9f) return 2;
    return 0;
}

/* The length of a colour sequence at s (ESC [ then digits and semicolons, then m), or 0. */
static size_t colour_length(const unsigned char *s, size_t n) {
    if (n < 3 || s[0] != 0x1b || s[1] != '[') return 0;
    size_t i = 2;
    while (i < n && i < 2 + 32 && ((s[i] >= '0' && s[i] <= '9') || s[i] == ';')) i++;
    return i < n && s[i] == 'm' ? i + 1 : 0;
}

/* Byte c as a Lua escape; three digits when the byte after it (next, n after: 0 for none)
 * is a digit, so the escape reads back as c alone. */
static void put_escape(FILE *out, unsigned char c, const unsigned char *next, size_t n) {
    if (n > 0 && next[0] >= '0' && next[0] <= '9') fprintf(out, "\\%03u", (unsigned)c);
    else fprintf(out, "\\%u", (unsigned)c);
}

void kcmd_put_text(FILE *out, const char *text, size_t len, bool tty) {
    if (!tty) {
        fwrite(text, 1, len, out);
        return;
    }
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, run = 0; /* s[run..i) passes as it is */
    while (i < len) {
        size_t control = kcmd_control_length(text + i, len - i);
        if (!control) {
            i++;
            continue;
        }
        fwrite(s + run, 1, i - run, out);
        size_t colour = colour_length(s + i, len - i);
        if (colour) {
            fwrite(s + i, 1, colour, out);
            i += colour;
        } else {
            for (size_t k = i; k < i + control; k++) put_escape(out, s[k], s + k + 1, len - k - 1);
            i += control;
        }
        run = i;
    }
    fwrite(s + run, 1, len - run, out);
}
