/* test_number_text.c: Check suite for kl_number_text, the one formatter the persist addon and the
 * Lua binding write message numbers with: '.' for the decimal point in a decimal-comma locale too. */
#include <check.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../core/src/number_text.h"
#include "test_registry.h"

/* fmt's text of n under de_DE (a decimal comma), or NULL with a note when it is not installed. */
static const char *german(char *buf, size_t size, const char *fmt, double n) {
    if (!setlocale(LC_NUMERIC, "de_DE.UTF-8")) {
        fprintf(stderr, "skipped: no de_DE.UTF-8 locale (scripts/deps.sh installs it)\n");
        return NULL;
    }
    char plain[32];
    snprintf(plain, sizeof plain, "%g", 1.5);
    ck_assert_str_eq(plain, "1,5"); /* the locale is in force */
    kl_number_text(buf, size, fmt, n);
    setlocale(LC_NUMERIC, "C");
    return buf;
}

static void assert_text(const char *fmt, double n, const char *want) {
    char buf[64];
    if (!german(buf, sizeof buf, fmt, n)) return;
    ck_assert_msg(strcmp(buf, want) == 0, "%s of %.17g: got '%s', want '%s'", fmt, n, buf, want);
}

KILN_TEST_GROUP(number_text);

/* persist's refusal ("%s is out of range for a float"): "%g" of a finite JSON number */
KILN_TEST(number_text, the_persist_form_reads_alike_in_a_comma_locale) {
    assert_text("%g", 1.5e39, "1.5e+39");
    assert_text("%g", 1e300, "1e+300");
    assert_text("%g", -1e300, "-1e+300");
    assert_text("%g", 0.1, "0.1");
    assert_text("%g", -0.0, "-0");
    assert_text("%g", 9007199254740993.0, "9.0072e+15");
}

/* the binding's forms: "%.14g" (a float out of range, a non-integral index), "%.1f" (LuaJIT's 1.0),
 * "%.3g" (budgets); a NaN or an infinity has no decimal point to mend */
KILN_TEST(number_text, the_binding_forms_read_alike_in_a_comma_locale) {
    assert_text("%.14g", 0.1, "0.1");
    assert_text("%.14g", 1e300, "1e+300");
    assert_text("%.14g", 18446744073709551616.0, "1.844674407371e+19");
    assert_text("%.14g", 9007199254740993.0, "9.007199254741e+15");
    assert_text("%.14g", INFINITY, "inf");
    assert_text("%.14g", -INFINITY, "-inf");
    assert_text("%.1f", -0.0, "-0.0");
    assert_text("%.1f", 3.0, "3.0");
    assert_text("%.3g", 2.5e6, "2.5e+06");
    char buf[8];
    if (german(buf, sizeof buf, "%.14g", NAN)) ck_assert_msg(strstr(buf, "nan") != NULL, "%s", buf);
}

/* a text cut short by the buffer is still terminated and mended */
KILN_TEST(number_text, a_short_buffer_keeps_a_terminated_mended_prefix) {
    char buf[4];
    if (german(buf, sizeof buf, "%.14g", 1.25)) ck_assert_str_eq(buf, "1.2");
}
