/* The C API's normal use and its error paths: NULL, freed handles, wrong
 * kinds, small buffers, bad config. Every error returns a code and a
 * message; nothing crashes (run under ASan/UBSan/LSan). */
#include <stdint.h>
#include "check.h"

int main(void) {
    wm_sampler *s = NULL;
    wm_loop_probe *lp = NULL;
    wm_sleep_probe *sp = NULL;
    wm_findings *f = NULL;
    wm_config cfg;
    char small[8];
    size_t len = 0, count = 0;
    char *json = NULL;

    CHECK(strlen(wm_version()) > 0);
    CHECK(strcmp(wm_status_str(WM_ERR_WRONG_KIND), "WM_ERR_WRONG_KIND") == 0);
    CHECK(strcmp(wm_status_str(999), "WM_ERR_UNKNOWN") == 0);

    /* Config */
    CHECK_STATUS(wm_config_default(NULL), WM_ERR_NULL);
    CHECK_STATUS(wm_config_default(&cfg), WM_OK);
    CHECK(cfg.size == sizeof cfg && cfg.interval_ns == 1000000000u && cfg.history == 300);
    cfg.size = 3;
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL && strstr(wm_last_error(), "wm_config_default") != NULL);
    wm_config_default(&cfg);
    cfg.interval_ns = 0;
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(wm_last_error(), "interval") != NULL);
    wm_config_default(&cfg);
    cfg.busy_poll_idle_ratio = 2.0;
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(wm_last_error(), "busy_poll_idle_ratio") != NULL);
    wm_config_default(&cfg);
    CHECK(cfg.thresholds_json == NULL);
    cfg.thresholds_json = "{\"cpu_hog_pct\": 50}";
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL && strstr(wm_last_error(), "cpu_hog_pct") != NULL);
    cfg.thresholds_json = "{\"cpu_hog_percent\": 50.0}";
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_OK);
    CHECK_STATUS(wm_sampler_report_json_alloc(s, &json), WM_OK);
    CHECK(strstr(json, "\"cpu_hog_percent\":50.0") != NULL);
    wm_string_free(json);
    json = NULL;
    wm_sampler_free(s);
    s = NULL;
    CHECK_STATUS(wm_sampler_create(NULL, NULL), WM_ERR_NULL);

    /* A working sampler and probes */
    wm_config_default(&cfg);
    cfg.interval_ns = 10 * 1000 * 1000;
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_OK);
    CHECK(s != NULL);
    CHECK_STATUS(wm_sampler_stop(s), WM_ERR_NOT_RUNNING);
    CHECK_STATUS(wm_sampler_start(s), WM_OK);
    CHECK_STATUS(wm_sampler_start(s), WM_ERR_ALREADY_RUNNING);
    CHECK_STATUS(wm_loop_probe_create(s, "c-loop", &lp), WM_OK);
    CHECK_STATUS(wm_sleep_probe_create(s, "c-nap", &sp), WM_OK);
    {
        wm_loop_probe *tmp = lp;
        CHECK_STATUS(wm_loop_probe_create(s, NULL, &tmp), WM_ERR_NULL);
        CHECK(tmp == NULL); /* out is cleared on failure */
    }
    CHECK_STATUS(wm_loop_probe_create(s, "\xff\xfe", &(wm_loop_probe *){0}), WM_ERR_INVALID_ARGUMENT);
    {
        char longname[100];
        memset(longname, 'x', sizeof longname - 1);
        longname[sizeof longname - 1] = '\0';
        wm_loop_probe *tmp = NULL;
        CHECK_STATUS(wm_loop_probe_create(s, longname, &tmp), WM_ERR_INVALID_ARGUMENT);
        CHECK(tmp == NULL);
    }
    for (int i = 0; i < 100; i++) {
        CHECK_STATUS(wm_loop_probe_before_wait(lp, 0), WM_OK);
        CHECK_STATUS(wm_loop_probe_after_wait(lp, 1), WM_OK);
    }
    CHECK_STATUS(wm_sleep_probe_begin(sp, 1000), WM_OK);
    CHECK_STATUS(wm_sleep_probe_end(sp), WM_OK);
    CHECK_STATUS(wm_sampler_sample(s), WM_OK);

    /* NULL handles */
    CHECK_STATUS(wm_loop_probe_before_wait(NULL, 0), WM_ERR_NULL);
    CHECK_STATUS(wm_loop_probe_after_wait(NULL, 0), WM_ERR_NULL);
    CHECK_STATUS(wm_sleep_probe_begin(NULL, 0), WM_ERR_NULL);
    CHECK_STATUS(wm_sleep_probe_end(NULL), WM_ERR_NULL);
    CHECK_STATUS(wm_sampler_start(NULL), WM_ERR_NULL);
    CHECK_STATUS(wm_sampler_sample(NULL), WM_ERR_NULL);
    CHECK_STATUS(wm_sampler_findings(NULL, &f), WM_ERR_NULL);
    CHECK_STATUS(wm_sampler_findings(s, NULL), WM_ERR_NULL);
    CHECK_STATUS(wm_findings_count(NULL, &count), WM_ERR_NULL);
    CHECK_STATUS(wm_sampler_report_json(s, small, sizeof small, NULL), WM_ERR_NULL);
    CHECK_STATUS(wm_sampler_report_json(s, NULL, 10, &len), WM_ERR_NULL);
    CHECK_STATUS(wm_sampler_report_json_alloc(s, NULL), WM_ERR_NULL);
    {
        wm_loop_probe *tmp = lp;
        CHECK_STATUS(wm_loop_probe_create(NULL, "x", &tmp), WM_ERR_NULL);
        CHECK(tmp == NULL);
    }
    /* free(NULL) is a no-op, as in C */
    CHECK_STATUS(wm_sampler_free(NULL), WM_OK);
    CHECK_STATUS(wm_loop_probe_free(NULL), WM_OK);
    wm_string_free(NULL);

    /* Wrong kinds (the casts are what a confused host would do) */
    CHECK_STATUS(wm_sleep_probe_begin((wm_sleep_probe *)lp, 10), WM_ERR_WRONG_KIND);
    CHECK(strstr(wm_last_error(), "wm_sleep_probe") && strstr(wm_last_error(), "wm_loop_probe"));
    CHECK_STATUS(wm_loop_probe_before_wait((wm_loop_probe *)sp, 0), WM_ERR_WRONG_KIND);
    CHECK_STATUS(wm_loop_probe_after_wait((wm_loop_probe *)s, 0), WM_ERR_WRONG_KIND);
    CHECK_STATUS(wm_sampler_start((wm_sampler *)lp), WM_ERR_WRONG_KIND);
    CHECK_STATUS(wm_loop_probe_free((wm_loop_probe *)sp), WM_ERR_WRONG_KIND);
    CHECK_STATUS(wm_sleep_probe_free((wm_sleep_probe *)lp), WM_ERR_WRONG_KIND);
    CHECK_STATUS(wm_sampler_free((wm_sampler *)lp), WM_ERR_WRONG_KIND);
    /* ...and the handles still work for their own kind */
    CHECK_STATUS(wm_loop_probe_before_wait(lp, -1), WM_OK);
    CHECK_STATUS(wm_loop_probe_after_wait(lp, 0), WM_OK);

    /* Reports */
    CHECK_STATUS(wm_sampler_report_json(s, NULL, 0, &len), WM_ERR_BUFFER_TOO_SMALL);
    CHECK(len > 100);
    CHECK_STATUS(wm_sampler_report_json(s, small, sizeof small, &len), WM_ERR_BUFFER_TOO_SMALL);
    {
        size_t cap = len + 4096;
        char *buf = malloc(cap);
        CHECK(buf != NULL);
        CHECK_STATUS(wm_sampler_report_json(s, buf, cap, &len), WM_OK);
        CHECK(strlen(buf) == len && buf[0] == '{' && strstr(buf, "\"system\"") != NULL);
        free(buf);
    }
    CHECK_STATUS(wm_sampler_report_json_alloc(s, &json), WM_OK);
    CHECK(json != NULL && strstr(json, "\"findings\"") != NULL);
    wm_string_free(json);

    /* Findings */
    CHECK_STATUS(wm_sampler_findings(s, &f), WM_OK);
    CHECK_STATUS(wm_findings_count(f, &count), WM_OK);
    CHECK_STATUS(wm_findings_count(f, NULL), WM_ERR_NULL);
    {
        wm_finding one;
        CHECK_STATUS(wm_findings_get(f, count, &one), WM_ERR_OUT_OF_RANGE);
        CHECK_STATUS(wm_findings_get(f, 0, NULL), count ? WM_ERR_NULL : WM_ERR_OUT_OF_RANGE);
        CHECK_STATUS(wm_findings_get((wm_findings *)s, 0, &one), WM_ERR_WRONG_KIND);
    }

    /* Freed handles: refused, never read as live objects */
    CHECK_STATUS(wm_findings_free(f), WM_OK);
    CHECK_STATUS(wm_findings_count(f, &count), WM_ERR_FREED);
    CHECK_STATUS(wm_findings_free(f), WM_ERR_FREED);
    CHECK_STATUS(wm_loop_probe_free(lp), WM_OK);
    CHECK_STATUS(wm_loop_probe_before_wait(lp, 0), WM_ERR_FREED);
    CHECK(strstr(wm_last_error(), "freed") != NULL);
    CHECK_STATUS(wm_loop_probe_free(lp), WM_ERR_FREED);
    CHECK_STATUS(wm_sampler_stop(s), WM_OK);
    CHECK_STATUS(wm_sampler_free(s), WM_OK);
    CHECK_STATUS(wm_sampler_start(s), WM_ERR_FREED);
    /* a probe outlives its sampler: it records, nobody reads it */
    CHECK_STATUS(wm_sleep_probe_begin(sp, 10), WM_OK);
    CHECK_STATUS(wm_sleep_probe_end(sp), WM_OK);
    CHECK_STATUS(wm_sleep_probe_free(sp), WM_OK);
    CHECK_STATUS(wm_sleep_probe_end(sp), WM_ERR_FREED);

    /* Misaligned garbage is refused before any read */
    CHECK_STATUS(wm_loop_probe_before_wait((wm_loop_probe *)(uintptr_t)1, 0), WM_ERR_BAD_HANDLE);

    if (wm_failures) {
        fprintf(stderr, "api_errors: %d failure(s)\n", wm_failures);
        return 1;
    }
    printf("api_errors: ok\n");
    return 0;
}
