/* A library without SRT_HOOK_LIBRARY(): the engine must refuse it. */
#include <stddef.h>

void *th_factory(const char *config_json, const void *host)
{
    (void)config_json;
    (void)host;
    return NULL;
}
