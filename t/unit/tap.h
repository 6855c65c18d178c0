/* Minimal TAP producer for the C unit tests; `prove --exec ''` reads its output. */
#ifndef SRT_TAP_H
#define SRT_TAP_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_count, tap_failed;

static int tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    tap_count++;
    printf("%sok %d - ", cond ? "" : "not ", tap_count);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!cond)
        tap_failed++;
    return cond;
}

static void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void tap_diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* Plan at the end, so a test that dies half-way is reported as a failure by prove. */
static int tap_done(void) __attribute__((unused));
static int tap_done(void)
{
    printf("1..%d\n", tap_count);
    return tap_failed ? 1 : 0;
}

/* Test data from a fixed seed (xorshift64): the same sequence on every run. */
static uint64_t tap_rng = 0x9E3779B97F4A7C15ull;
static uint32_t tap_rand(void) __attribute__((unused));
static uint32_t tap_rand(void)
{
    tap_rng ^= tap_rng << 13;
    tap_rng ^= tap_rng >> 7;
    tap_rng ^= tap_rng << 17;
    return (uint32_t)(tap_rng >> 11);
}

#define ok(cond, ...) tap_ok(!!(cond), __VA_ARGS__)
#define is_int(got, want, ...) \
    (tap_ok((long long)(got) == (long long)(want), __VA_ARGS__) || \
     (tap_diag("  got %lld, want %lld", (long long)(got), (long long)(want)), 0))

#endif
