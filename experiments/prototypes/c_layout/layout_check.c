/*
 * Prototype, not part of hivenet-db: the layout check of a unified or system serial as one
 * C function, to measure what issue 13's steps goal would reach if the SPEC's checks cost a
 * few nodes instead of PostgreSQL 15's expression trees (docs/benchmarks.md). The same test
 * as the generated _serial_valid of those formats: 8 letters or digits, then digits only;
 * instance not 00, year not 0000, a real month and day (leap years), seq not all zeros.
 */
#include "postgres.h"
#include "fmgr.h"
#include "utils/builtins.h"

PG_MODULE_MAGIC;

static int
digits(const char *s, int n)
{
    int v = 0;

    for (int i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

PG_FUNCTION_INFO_V1(layout_check);

/* layout_check(serial text, seq_digits int) → boolean */
Datum
layout_check(PG_FUNCTION_ARGS)
{
    text       *serial = PG_GETARG_TEXT_PP(0);
    int         seq = PG_GETARG_INT32(1);
    const char *s = VARDATA_ANY(serial);
    int         len = VARSIZE_ANY_EXHDR(serial);
    int         year, month, day, last;
    bool        zeros = true;

    if (len != 18 + seq)
        PG_RETURN_BOOL(false);
    for (int i = 0; i < len; i++)
    {
        char c = s[i];

        if (!(c >= '0' && c <= '9') &&
            (i >= 8 || !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))))
            PG_RETURN_BOOL(false);
    }
    year = digits(s + 10, 4);
    month = digits(s + 14, 2);
    day = digits(s + 16, 2);
    if (digits(s + 8, 2) == 0 || year == 0 || month < 1 || month > 12 || day < 1)
        PG_RETURN_BOOL(false);
    last = month == 2 ? 28 + ((year % 4 == 0 && year % 100 != 0) || year % 400 == 0)
                      : 30 + ((month + month / 8) % 2);
    if (day > last)
        PG_RETURN_BOOL(false);
    for (int i = 18; i < len; i++)
        zeros = zeros && s[i] == '0';
    PG_RETURN_BOOL(!zeros);
}
