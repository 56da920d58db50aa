/* Built with `cc app.c $(pkg-config --cflags --libs wakemeter)` only. */
#include <stdio.h>
#include <string.h>
#include <wakemeter.h>

int main(void) {
    wm_sampler *s = NULL;
    char *json = NULL;
    if (wm_sampler_create(NULL, &s) != WM_OK || wm_sampler_sample(s) != WM_OK ||
        wm_sampler_report_json_alloc(s, &json) != WM_OK) {
        fprintf(stderr, "failed: %s\n", wm_last_error());
        return 1;
    }
    printf("pkg-config app: wakemeter %s, report of %zu bytes\n", wm_version(), strlen(json));
    wm_string_free(json);
    wm_sampler_free(s);
    return 0;
}
