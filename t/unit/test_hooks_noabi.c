/* A library without SRT_HOOK_LIBRARY(): the engine must refuse it. */
#include <stddef.h>

void *th_factory(const char *config_json, const void *host)
{
    (void)config_json;
    (void)host;
    return NULL;
}

/* Loading runs this: the nginx master's check (srt_hook_spec_check_file) must not. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void mark_loaded(void)
{
    const char *p = getenv("SRT_TEST_CTOR_MARK");
    int fd = p ? open(p, O_WRONLY | O_CREAT, 0600) : -1;
    if (fd >= 0)
        close(fd);
}
