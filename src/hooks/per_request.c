/* Per-request hook selections: the table of live requests' selections and the clamp of a
 * selection read from the channel slot (srt/request.h). */
#include <stdlib.h>
#include <string.h>

#include "hooks/hooks_internal.h"

const srt_hook_req *srt_hook_req_find(const srt_hook_req_table *t, uint64_t id)
{
    for (int k = 0; k < t->n; k++)
        if (t->v[k]->id == id)
            return t->v[k];
    return NULL;
}

void srt_hook_req_table_free(srt_hook_req_table *t)
{
    for (int k = 0; k < t->n; k++)
        srt_hook_req_free(t->v[k]);
    free(t->v);
    memset(t, 0, sizeof *t);
}

void srt_hook_req_free(srt_hook_req *e)
{
    if (e == NULL)
        return;
    for (int i = 0; i < e->n; i++) {
        srt_hook_host_fini(&e->host[i]);
        free(e->config[i]);
    }
    free(e);
}

void srt_request_hooks_clamp(srt_request_hooks *h)
{
    if (h->n < 0)
        h->n = 0;
    if (h->n > SRT_REQ_MAX_HOOKS)
        h->n = SRT_REQ_MAX_HOOKS;
    h->config_text[SRT_REQ_HOOK_CONFIG_MAX - 1] = '\0';
    for (int i = 0; i < h->n; i++) {
        h->name[i][SRT_REQ_HOOK_NAME_MAX - 1] = '\0';
        if (h->config_off[i] >= SRT_REQ_HOOK_CONFIG_MAX ||
            h->config_len[i] >= SRT_REQ_HOOK_CONFIG_MAX - h->config_off[i] ||
            h->config_text[h->config_off[i] + h->config_len[i]] != '\0')
            h->config_len[i] = 0;
    }
}
