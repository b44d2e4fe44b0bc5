/* termtext.c: text from statements, mods and consoles written to the user's terminal with
 * its control characters shown, not obeyed. */
#include "termtext.h"

#include <string.h>

/* The length of a colour sequence at s (ESC [ then digits and semicolons, then m), or 0. */
static size_t colour_length(const unsigned char *s) {
    if (s[0] != 0x1b || s[1] != '[') return 0;
    size_t i = 2;
    while (i < 2 + 32 && ((s[i] >= '0' && s[i] <= '9') || s[i] == ';')) i++;
    return s[i] == 'm' ? i + 1 : 0;
}

static void put_escape(FILE *out, unsigned char c, unsigned char next) {
    if (next >= '0' && next <= '9') fprintf(out, "\\%03u", (unsigned)c);
    else fprintf(out, "\\%u", (unsigned)c);
}

void kcmd_put_text(FILE *out, const char *text, bool tty) {
    if (!tty) {
        fputs(text, out);
        return;
    }
    const unsigned char *s = (const unsigned char *)text;
    size_t run = 0; /* bytes at s that pass as they are */
    for (;;) {
        unsigned char c = s[run];
        bool control = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f;
        bool c1 = c == 0xc2 && s[run + 1] >= 0x80 && s[run + 1] <= 0x9f;
        if (c != 0 && !control && !c1) {
            run++;
            continue;
        }
        fwrite(s, 1, run, out);
        s += run;
        run = 0;
        if (c == 0) return;
        size_t colour = colour_length(s);
        if (colour) {
            fwrite(s, 1, colour, out);
            s += colour;
        } else if (c1) {
            fprintf(out, "\\194");
            put_escape(out, s[1], s[2]);
            s += 2;
        } else {
            put_escape(out, c, s[1]);
            s++;
        }
    }
}
