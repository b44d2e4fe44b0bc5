/* number_text.h: a number written into a message with '.' for its decimal point, whatever the
 * host's LC_NUMERIC (snprintf follows it: "1,5e+39" in de_DE), so that messages read alike everywhere. */
#ifndef KILN_NUMBER_TEXT_H
#define KILN_NUMBER_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* n formatted by fmt (one floating conversion, no flag that groups digits) into buf, a decimal
 * comma made a '.'. Returns buf. Inline in a header, not a hidden function: the persist addon and
 * the Lua binding both use it, and a host may link the binding against the shared libkiln. */
static inline const char *kl_number_text(char *buf, size_t size, const char *fmt, double n) {
    snprintf(buf, size, fmt, n);
    for (char *p = buf; *p; p++)
        if (*p == ',') *p = '.';
    return buf;
}

#endif
