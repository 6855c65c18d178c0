/*
 * The scheduler processes.
 *
 * Stock nginx spawns a "cache manager" helper process, supervised and respawned by the
 * master, for every ngx_path_t that has a manager callback. We register one such path;
 * in the helper, our manager callback becomes a supervisor: it forks one scheduler
 * process per srt_model, notices its death through a lifeline pipe registered in the
 * helper's event loop, fails the requests it was running, and respawns it with an
 * exponential backoff. The scheduler process is the only one that ever loads a model or
 * touches a device (the master, the helper and the workers never do).
 *
 * Exactly one scheduler owns a model at a time: srt_chan_sched_open() binds the model's
 * scheduler doorbell, which only one process can hold; a successor started on reload
 * waits (on a pidfd, not a poll loop) until its predecessor has drained and exited.
 */

#include "ngx_http_srt_module.h"

#include <poll.h>
#include <sys/prctl.h>


#define NGX_HTTP_SRT_BACKOFF_MIN   250
#define NGX_HTTP_SRT_BACKOFF_MAX   30000   /* a model that fails to load */
#define NGX_HTTP_SRT_CRASH_BACKOFF_MAX  1000   /* one that crashed: it served */
#define NGX_HTTP_SRT_STABLE_SECS   30


#include "sched/serve.h"   /* srt_sched_run, the metrics sink */


static ngx_msec_t ngx_http_srt_manager(void *data);
static void ngx_http_srt_spawn(ngx_http_srt_model_t *m);
static void ngx_http_srt_lifeline_handler(ngx_event_t *ev);
static ngx_pid_t ngx_http_srt_lifeline_gone(ngx_http_srt_model_t *m);
static void ngx_http_srt_respawn_handler(ngx_event_t *ev);
static void ngx_http_srt_watch_handler(ngx_event_t *ev);
static void ngx_http_srt_supervisor_exit(void);
static void ngx_http_srt_supervisor_wait(void);
static void ngx_http_srt_close_lifelines(void);
static void ngx_http_srt_scheduler_main(ngx_http_srt_model_t *m, int lifeline,
    ngx_pid_t master);


static ngx_http_srt_main_conf_t  *ngx_http_srt_supervised;
static ngx_pid_t                  ngx_http_srt_supervisor_pid;
static srt_chan                  *ngx_http_srt_sched_chan;


ngx_int_t
ngx_http_srt_process_init_path(ngx_conf_t *cf, ngx_http_srt_main_conf_t *smcf)
{
    ngx_path_t  *path;

    path = ngx_pcalloc(cf->pool, sizeof(ngx_path_t));
    if (path == NULL) {
        return NGX_ERROR;
    }

    /* nginx creates this directory (srt_temp_path); the helper itself needs none */
    if (smcf->temp_path.len) {
        path->name = smcf->temp_path;
    } else {
        ngx_str_set(&path->name, "srt_temp");
    }

    if (ngx_conf_full_name(cf->cycle, &path->name, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    path->manager = ngx_http_srt_manager;
    path->data = smcf;
    path->conf_file = cf->conf_file->file.name.data;
    path->line = cf->conf_file->line;

    smcf->path = path;

    if (ngx_add_path(cf, &smcf->path) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Runs in the helper ("cache manager") process only. */

static ngx_msec_t
ngx_http_srt_manager(void *data)
{
    ngx_http_srt_main_conf_t *smcf = data;

    ngx_uint_t              i;
    ngx_http_srt_model_t  **mp;

    if (smcf->supervised) {
        return 3600 * 1000;
    }

    smcf->supervised = 1;
    ngx_http_srt_supervised = smcf;
    ngx_http_srt_supervisor_pid = ngx_getpid();

    /* the helper exits through exit(): take the schedulers down with it */
    atexit(ngx_http_srt_supervisor_exit);

    mp = smcf->models.elts;

    for (i = 0; i < smcf->models.nelts; i++) {
        mp[i]->backoff = NGX_HTTP_SRT_BACKOFF_MIN;
        mp[i]->respawn.handler = ngx_http_srt_respawn_handler;
        mp[i]->respawn.data = mp[i];
        mp[i]->respawn.log = ngx_cycle->log;
        mp[i]->respawn.cancelable = 1;
        mp[i]->watch.handler = ngx_http_srt_watch_handler;
        mp[i]->watch.data = mp[i];
        mp[i]->watch.log = ngx_cycle->log;
        mp[i]->watch.cancelable = 1;

        if (mp[i]->chan == NULL) {
            continue;
        }

        ngx_http_srt_spawn(mp[i]);
    }

    return 3600 * 1000;
}


static void
ngx_http_srt_supervisor_exit(void)
{
    int                     sig;
    ngx_uint_t              i;
    ngx_http_srt_model_t  **mp;

    /* the schedulers and their ranks inherited this registration */
    if (ngx_http_srt_supervised == NULL
        || ngx_getpid() != ngx_http_srt_supervisor_pid)
    {
        return;
    }

    /* quit (reload, graceful stop): let running requests finish; else stop now */
    sig = ngx_terminate ? SIGTERM : SIGQUIT;

    mp = ngx_http_srt_supervised->models.elts;

    for (i = 0; i < ngx_http_srt_supervised->models.nelts; i++) {
        if (mp[i]->pid != NGX_INVALID_PID) {
            kill(mp[i]->pid, sig);
        }
    }

    if (sig == SIGQUIT) {
        ngx_http_srt_supervisor_wait();
    }
}


/*
 * The helper exits on a reload or a graceful stop while its schedulers still
 * finish what they run, for as long as that takes: it watches their lifelines
 * until they are gone, and one that dies meanwhile has its requests failed
 * here, as ever. Nobody else would when no successor comes to reclaim them
 * (nginx -s quit, a reload that gave the model a new channel or dropped it):
 * the workers waited for them forever, and nginx never finished quitting. A
 * stop (the workers are gone too) ends the wait.
 */

static void
ngx_http_srt_supervisor_wait(void)
{
    int                     rc;
    char                    why[128];
    ngx_pid_t               pid;
    ngx_uint_t              i, k, nfds;
    struct pollfd          *pfd;
    ngx_http_srt_model_t  **mp, *m;

    mp = ngx_http_srt_supervised->models.elts;

    nfds = ngx_http_srt_supervised->models.nelts;

    pfd = ngx_alloc(nfds * sizeof(struct pollfd), ngx_cycle->log);
    if (pfd == NULL) {
        return;
    }

    for ( ;; ) {

        if (ngx_terminate) {
            for (i = 0; i < ngx_http_srt_supervised->models.nelts; i++) {
                if (mp[i]->pid != NGX_INVALID_PID) {
                    kill(mp[i]->pid, SIGTERM);
                }
            }

            break;
        }

        nfds = 0;

        for (i = 0; i < ngx_http_srt_supervised->models.nelts; i++) {
            if (mp[i]->pid != NGX_INVALID_PID && mp[i]->lifeline != NULL) {
                pfd[nfds].fd = mp[i]->lifeline->fd;
                pfd[nfds].events = POLLIN;
                pfd[nfds].revents = 0;
                nfds++;
            }
        }

        if (nfds == 0) {
            break;
        }

        rc = poll(pfd, nfds, 1000);

        if (rc == -1) {
            if (ngx_errno == NGX_EINTR) {
                continue;
            }

            ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                          "srt: poll() failed");
            break;
        }

        k = 0;

        for (i = 0; i < ngx_http_srt_supervised->models.nelts; i++) {
            m = mp[i];

            if (m->pid == NGX_INVALID_PID || m->lifeline == NULL) {
                continue;
            }

            if (pfd[k++].revents == 0) {
                continue;
            }

            pid = ngx_http_srt_lifeline_gone(m);
            if (pid == NGX_INVALID_PID) {
                continue;
            }

            /* one that stopped as asked gave its model up itself */
            if (srt_chan_sched_pid(m->chan) != pid) {
                continue;
            }

            if (srt_chan_sched_state_get(m->chan, NULL, 0)
                != SRT_CHAN_SCHED_FAILED)
            {
                ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                              "srt: scheduler process %P for model \"%V\" "
                              "exited unexpectedly while stopping",
                              pid, &m->name);
            }

            ngx_snprintf((u_char *) why, sizeof(why) - 1,
                         "scheduler process %P exited%Z", pid);

            srt_chan_sched_crashed(m->chan, pid, why);
        }
    }

    ngx_free(pfd);
}


static void
ngx_http_srt_spawn(ngx_http_srt_model_t *m)
{
    int                fds[2];
    sigset_t           all, old;
    ngx_pid_t          pid, master;
    ngx_connection_t  *c;

    master = getppid();

    if (pipe2(fds, O_CLOEXEC) == -1) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                      "srt_model \"%V\": pipe() failed", &m->name);
        ngx_add_timer(&m->respawn, m->backoff);
        return;
    }

    /*
     * Signals wait until the scheduler has its own handlers: nginx's, which
     * it would run until then, only set flags nobody reads there, so a QUIT
     * sent in that moment was lost.
     */
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);

    pid = fork();

    if (pid != 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
    }

    switch (pid) {

    case -1:
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                      "srt_model \"%V\": fork() failed", &m->name);
        close(fds[0]);
        close(fds[1]);
        ngx_add_timer(&m->respawn, m->backoff);
        return;

    case 0:
        close(fds[0]);
        ngx_http_srt_close_lifelines();
        ngx_http_srt_scheduler_main(m, fds[1], master);
        _exit(2);   /* not reached */

    default:
        break;
    }

    close(fds[1]);

    m->pid = pid;
    m->started = ngx_time();

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "srt: scheduler process %P started for model \"%V\"",
                  pid, &m->name);

    if (ngx_nonblocking(fds[0]) == -1) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                      ngx_nonblocking_n " failed");
    }

    c = ngx_get_connection(fds[0], ngx_cycle->log);
    if (c == NULL) {
        close(fds[0]);
        return;
    }

    c->data = m;
    c->read->handler = ngx_http_srt_lifeline_handler;
    c->read->log = ngx_cycle->log;
    c->write->log = ngx_cycle->log;

    if (ngx_add_event(c->read, NGX_READ_EVENT, 0) != NGX_OK) {
        ngx_close_connection(c);
        return;
    }

    m->lifeline = c;

    if (m->watchdog && !m->watch.timer_set) {
        ngx_add_timer(&m->watch, ngx_min(m->watchdog / 4 + 1, 1000));
    }
}


/*
 * In a new scheduler: the fork gave it the helper's ends of the other schedulers'
 * lifelines. Kept, such an end would keep its pipe open after the helper closed it, and
 * with it the helper's epoll registration of it: once that scheduler died, the helper's
 * epoll_wait reported the hang-up of a pipe it no longer read, again and again, at 100% CPU.
 */

static void
ngx_http_srt_close_lifelines(void)
{
    ngx_uint_t              i;
    ngx_http_srt_model_t  **mp;

    mp = ngx_http_srt_supervised->models.elts;

    for (i = 0; i < ngx_http_srt_supervised->models.nelts; i++) {
        if (mp[i]->lifeline != NULL) {
            close(mp[i]->lifeline->fd);
        }
    }
}


/*
 * The lifeline pipe reads EOF when the scheduler process is gone, however it
 * died: then the pipe is closed and the scheduler's pid returned (and cleared),
 * else NGX_INVALID_PID.
 */

static ngx_pid_t
ngx_http_srt_lifeline_gone(ngx_http_srt_model_t *m)
{
    u_char     buf[16];
    ssize_t    n;
    ngx_pid_t  pid;

    n = read(m->lifeline->fd, buf, sizeof(buf));
    if (n > 0 || (n == -1 && ngx_errno == NGX_EAGAIN)) {
        return NGX_INVALID_PID;
    }

    pid = m->pid;
    m->pid = NGX_INVALID_PID;
    ngx_close_connection(m->lifeline);
    m->lifeline = NULL;

    return pid;
}



static void
ngx_http_srt_lifeline_handler(ngx_event_t *ev)
{
    ngx_pid_t              pid;
    ngx_connection_t      *c;
    ngx_http_srt_model_t  *m;
    char                   why[128];
    int                    state;

    c = ev->data;
    m = c->data;

    pid = ngx_http_srt_lifeline_gone(m);
    if (pid == NGX_INVALID_PID) {
        return;
    }

    if (m->watch.timer_set) {
        ngx_del_timer(&m->watch);
    }

    state = srt_chan_sched_state_get(m->chan, NULL, 0);

    if (ngx_time() - m->started >= NGX_HTTP_SRT_STABLE_SECS) {
        m->backoff = NGX_HTTP_SRT_BACKOFF_MIN;
    }

    ngx_snprintf((u_char *) why, sizeof(why) - 1,
                 "scheduler process %P exited%Z", pid);

    if (state == SRT_CHAN_SCHED_FAILED) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "srt: scheduler process %P for model \"%V\" could not "
                      "load it; retrying in %M ms", pid, &m->name, m->backoff);

    } else {
        m->crashes++;
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "srt: scheduler process %P for model \"%V\" exited "
                      "unexpectedly; respawning in %M ms",
                      pid, &m->name, m->backoff);
    }

    /* fail what it was running, and publish DOWN unless a successor took over */
    srt_chan_sched_crashed(m->chan, pid, why);

    ngx_add_timer(&m->respawn, m->backoff);

    /* a model that loads but crashes stays down a second at most between
     * attempts; retrying a load that fails backs off further */
    m->backoff *= 2;
    if (m->backoff > (state == SRT_CHAN_SCHED_FAILED
                      ? NGX_HTTP_SRT_BACKOFF_MAX : NGX_HTTP_SRT_CRASH_BACKOFF_MAX))
    {
        m->backoff = state == SRT_CHAN_SCHED_FAILED
                     ? NGX_HTTP_SRT_BACKOFF_MAX : NGX_HTTP_SRT_CRASH_BACKOFF_MAX;
    }
}


/*
 * srt_watchdog_timeout, as SGLang's: a serving scheduler that has not stepped
 * for that long (stopped, wedged in a kernel or a lock) is killed; its death
 * fails what it held and the usual respawn follows.
 */

static void
ngx_http_srt_watch_handler(ngx_event_t *ev)
{
    ngx_http_srt_model_t  *m = ev->data;

    ngx_msec_t  stale;

    if (ngx_terminate || ngx_quit || ngx_exiting || m->pid == NGX_INVALID_PID) {
        return;
    }

    stale = ngx_http_srt_sched_stale(m);

    if (stale && srt_chan_sched_pid(m->chan) == m->pid) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "srt: scheduler process %P for model \"%V\" has not "
                      "stepped for %M ms (srt_watchdog_timeout %M ms): "
                      "killing it", m->pid, &m->name, stale, m->watchdog);
        kill(m->pid, SIGKILL);
        return;     /* the lifeline reports the death */
    }

    ngx_add_timer(ev, ngx_min(m->watchdog / 4 + 1, 1000));
}


static void
ngx_http_srt_respawn_handler(ngx_event_t *ev)
{
    ngx_http_srt_model_t  *m = ev->data;

    if (ngx_terminate || ngx_quit || ngx_exiting) {
        return;
    }

    ngx_http_srt_spawn(m);
}


/* ---- the scheduler process ---- */

static void
ngx_http_srt_sched_signal(int signo)
{
    if (ngx_http_srt_sched_chan) {
        srt_chan_sched_request_stop(ngx_http_srt_sched_chan,
                                    signo == SIGQUIT ? 1 : 2);
    }
}


void
ngx_http_srt_log_sink(srt_log_level level, const char *msg, void *user)
{
    ngx_uint_t  l;

    /* this process runs no nginx event loop: keep the log's clock current */
    ngx_time_update();

    switch (level) {
    case SRT_LOG_ERROR:
        l = NGX_LOG_ERR;
        break;
    case SRT_LOG_WARN:
        l = NGX_LOG_WARN;
        break;
    case SRT_LOG_INFO:
        l = NGX_LOG_NOTICE;
        break;
    default:
        l = NGX_LOG_DEBUG;
        break;
    }

    ngx_log_error(l, ngx_cycle->log, 0, "srt: %s", msg);
}


/* The scheduler's metrics into the channel for srt_metrics, as the plain struct: the
 * worker that serves /metrics renders the text (ngx_http_srt_metrics_handler). */

static void
ngx_http_srt_metrics_sink(const srt_sched_metrics *mt, void *user)
{
    ngx_http_srt_model_t *m = user;

    srt_chan_sched_publish_metrics(m->chan, mt, sizeof(srt_sched_metrics));
}


static void
ngx_http_srt_scheduler_main(ngx_http_srt_model_t *m, int lifeline,
    ngx_pid_t master)
{
    int                 rc, state;
    char                title[256], key[96];
    srt_err             err;
    sigset_t            set;
    ngx_uint_t          i;
    struct sigaction    sa;
    static const int    ignored[] = { SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH,
                                      SIGPIPE, SIGALRM, SIGIO };

    ngx_pid = ngx_getpid();

    /* die with the helper, and know it if it is already gone (the orphan's
     * new parent is init or a subreaper, not always pid 1) */
    (void) prctl(PR_SET_PDEATHSIG, SIGQUIT);

    if (getppid() != ngx_http_srt_supervisor_pid) {
        _exit(0);
    }

    ngx_memzero(&sa, sizeof(struct sigaction));
    sa.sa_handler = ngx_http_srt_sched_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGQUIT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    sa.sa_handler = SIG_IGN;
    for (i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
        sigaction(ignored[i], &sa, NULL);
    }

    sa.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &sa, NULL);

    sigemptyset(&set);
    sigprocmask(SIG_SETMASK, &set, NULL);

    ngx_snprintf((u_char *) title, sizeof(title) - 1,
                 "srt scheduler %V%Z", &m->name);
    ngx_setproctitle(title);

    srt_log_set_sink(ngx_http_srt_log_sink, NULL, SRT_LOG_INFO);

    ngx_http_srt_sched_chan = m->chan;

    /* lifeline stays open (it is inherited as fds[1]); the helper reads EOF when we die */
    (void) lifeline;

    /*
     * One owner per model of this nginx, even when a reload gave the model a new
     * channel (its slots or context changed): the old scheduler's lock is keyed by
     * the master's pid and the model's name, not by the channel.
     */
    ngx_snprintf((u_char *) key, sizeof(key) - 1, "%P-%V%Z", master, &m->name);
    srt_chan_sched_set_lock_key(m->chan, key);
    srt_chan_sched_set_generation(m->chan, m->chan_gen);

    if (srt_chan_sched_open(m->chan, &err) != SRT_OK) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "srt: scheduler for model \"%V\": %s", &m->name, err.msg);
        _exit(1);
    }

    ngx_time_update();
    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "srt: scheduler process %P owns model \"%V\" (%V)",
                  ngx_getpid(), &m->name, &m->path);

    srt_chan_sched_set_state(m->chan, SRT_CHAN_SCHED_LOADING,
                             "model loading", NULL);

    rc = srt_sched_run(m->chan, ngx_http_srt_metrics_sink, m, &err);

    ngx_time_update();

    if (rc != SRT_OK) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "srt: scheduler for model \"%V\" failed: %s",
                      &m->name, err.msg);

        /* DOWN: the scheduler gave up on a broken tensor-parallel group and
         * wants the respawn (requests wait for it), not a "failed" model */
        state = srt_chan_sched_state_get(m->chan, NULL, 0);

        if (state != SRT_CHAN_SCHED_FAILED && state != SRT_CHAN_SCHED_DOWN) {
            srt_chan_sched_set_state(m->chan, SRT_CHAN_SCHED_FAILED, err.msg,
                                     NULL);
        }

        _exit(1);
    }

    /*
     * Logged before the close: the close drops the owner lock, and a successor
     * waiting on it logs "owns" at once, so a log read in order would show two
     * owners at the same time.
     */
    ngx_time_update();
    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "srt: scheduler process %P for model \"%V\" exited",
                  ngx_getpid(), &m->name);

    srt_chan_sched_close(m->chan);

    /*
     * Our locks are free now. With the master gone no successor will come, so
     * its key lock and this channel's files go (the master's own exit sweep
     * found them still held); with it alive, only what a successor makes
     * afresh, and nothing a live process holds.
     */
    srt_chan_sock_dir_sweep(srt_chan_get_config(m->chan)->sock_dir,
                            kill(master, 0) == -1 && ngx_errno == NGX_ESRCH
                            ? (int) master : 0);

    _exit(0);
}
