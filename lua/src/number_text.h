/* number_text.h: a number written into a C message with '.' for its decimal point, whatever the
 * host's LC_NUMERIC (snprintf and lua_pushfstring's %f follow it): messages read alike everywhere. */
#ifndef KLUA_NUMBER_TEXT_H
#define KLUA_NUMBER_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* n formatted by fmt (one floating conversion, no flag that groups digits) into buf, a decimal
 * comma made a '.'. Returns buf. */
static inline const char *klua_number_text(char *buf, size_t size, const char *fmt, double n) {
    snprintf(buf, size, fmt, n);
    for (char *p = buf; *p; p++)
        if (*p == ',') *p = '.';
    return buf;
}

#endif
