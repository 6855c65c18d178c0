/* A hook library that claims another major ABI version: the engine must refuse it. */
#include <stdint.h>
#include <stddef.h>

__attribute__((visibility("default"))) const uint32_t srt_hook_abi_version = 2u << 16;

void *th_factory(const char *config_json, const void *host)
{
    (void)config_json;
    (void)host;
    return NULL;
}
