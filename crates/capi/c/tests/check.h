/* Tiny assertion helpers shared by the C tests. */
#ifndef WM_TEST_CHECK_H
#define WM_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wakemeter.h"

static int wm_failures = 0;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            wm_failures++;                                                   \
        }                                                                    \
    } while (0)

/* The call returns `want` and, if it is an error, leaves a message. */
#define CHECK_STATUS(call, want)                                                  \
    do {                                                                          \
        wm_status got_ = (call);                                                  \
        if (got_ != (want)) {                                                     \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n",          \
                    __FILE__, __LINE__, #call, wm_status_str((int)got_),          \
                    wm_status_str((int)(want)), wm_last_error());                 \
            wm_failures++;                                                        \
        } else if ((want) != WM_OK && wm_last_error()[0] == '\0') {               \
            fprintf(stderr, "%s:%d: %s: no last-error message\n", __FILE__,       \
                    __LINE__, #call);                                             \
            wm_failures++;                                                        \
        }                                                                         \
    } while (0)

#endif
