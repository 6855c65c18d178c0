# Client disconnects abort requests in the scheduler and free their slots; the scheduler
# process is respawned after kill -9; requests wait (srt_wait_ready) or get 503 meanwhile.
# Every block starts from a fresh nginx and makes the state it checks: blocks that need
# the scheduler's pid wait for the model first (/health).
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use POSIX ();

master_on();
log_level('info');

# long enough to outlast every deadline below on a fast machine too: 4000 tokens (context 4096)
# take 31 s here (slower as the context grows), more than TEST 10's 6 s on a CPU five times as
# fast; 1900 tokens took 10.5 s here, under 6 s on a machine twice as fast
our $LONG = '{"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0, "ignore_eos": true}';
our $LONG_STREAM = '{"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0, "ignore_eos": true, "stream": true}';

# A long request the client hangs up on: streamed, once the first event came back;
# not streamed, once the scheduler runs it. Then wait a second, as the blocks that
# make such a request do (`--- wait: 1`).
sub abort_long_request {
    my ($stream) = @_;
    Test::Srt::wait_ready();
    if ($stream) {
        my $got = Test::Srt::abort_after('/v1/completions', $LONG_STREAM, 10, qr/\r\n\r\n.*data: /s);
        Test::More::like($got, qr/^HTTP\/1\.1 200 .*data: /s, "the stream had begun when the client left");
    } else {
        my $pid = fork();
        if ($pid == 0) {
            Test::Srt::abort_after('/v1/completions', $LONG, 1.5);
            POSIX::_exit(0);
        }
        waitpid($pid, 0);
    }
    select undef, undef, undef, 1;
}

# A long request in flight when the scheduler is killed: 503 JSON, never a hang.
sub scheduler_dies_mid_request {
    Test::Srt::wait_ready();
    my $killer = Test::Srt::kill_scheduler_after(0.3);
    my ($st, $body) = Test::Srt::http_request('POST', '/v1/completions', $LONG);
    waitpid($killer, 0);
    Test::More::is($st, 503, "the request in flight when the scheduler died: 503");
    Test::More::like($body, qr/"message":"Generation failed: scheduler process \d+ exited","type":"server_error"/,
                     "... with the reason");
    # the next request is sent at once: queued for the dead scheduler or parked while its
    # successor loads, it is served either way (srt_wait_ready)
}

srt_defaults(timeout => 60, config => srt_location('/v1', srt_context_length => 4096,
                                                  srt_max_running_requests => 4,
                                                  srt_max_queued_requests => 4)
                                     . srt_location_also('/nowait', srt_wait_ready => undef));

run_tests();

__DATA__

=== TEST 1: the model loads
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: client goes away mid-stream: the request is aborted, its slot and KV are free again (4 running + 4 queued slots)
--- init
package main;
abort_long_request(1);
--- request
GET /v1/health
--- response_body_like chomp
^\{"status":"ok","model":"smol","running":0,"queued":0,"slots_free":8,"requests_total":1\}$
--- error_log eval
qr/srt: (client closed the connection|writing to the client failed), aborting the request/



=== TEST 4: client goes away while waiting for a non-streamed answer
--- init
Test::Srt::wait_ready();
--- request eval
"POST /v1/completions\n$main::LONG"
--- timeout: 1.5
--- abort
--- ignore_response
--- wait: 1
--- error_log
srt: client closed the connection, aborting the request



=== TEST 5: ... freed too
--- init
package main;
abort_long_request(0);
Test::More::ok(Test::Srt::count_log(qr/srt: client closed the connection, aborting the request/),
               "the request was aborted");
--- request
GET /v1/health
--- response_body_like chomp
^\{"status":"ok","model":"smol","running":0,"queued":0,"slots_free":8,"requests_total":1\}$



=== TEST 6: kill -9 of the scheduler: the master's helper respawns it with a backoff
--- init
package main;
Test::Srt::wait_ready();
my $pid = scheduler_pid() or die "no scheduler pid in the log";
kill 'KILL', $pid;
wait_log(qr/scheduler process $pid for model "smol" exited unexpectedly; respawning in \d+ ms/, 10)
    or die "the supervisor did not notice";
--- request
GET /nowait/health
--- error_code: 503
--- response_headers
Retry-After: 1
--- response_body_like chomp
"message":"Model \\"smol\\" is (not available|loading)



=== TEST 6b: repeated crashes: the respawn backoff stays at 1 s at most (it doubled to 4 s and on)
--- init
package main;
for my $round (1 .. 5) {
    Test::Srt::wait_ready('/v1', 60);
    my $pid = scheduler_pid() or die "no scheduler pid in the log";
    kill 'KILL', $pid;
    wait_log(qr/scheduler process $pid for model "smol" exited unexpectedly; respawning in \d+ ms/, 10)
        or die "the supervisor did not notice";
}
my @ms = Test::Srt::error_log() =~ /exited unexpectedly; respawning in (\d+) ms/g;
Test::More::is(scalar @ms, 5, "five crashes noticed");
Test::More::is(scalar(grep { $_ > 1000 } @ms), 0, "every respawn within 1 s (@ms)");
Test::Srt::wait_ready('/v1', 60);
--- request
GET /nowait/health
--- response_body_like chomp
"status":"ok"



=== TEST 7: requests wait for the respawned scheduler and are served by it
--- init
package main;
Test::Srt::wait_ready();
my $pid = scheduler_pid() or die "no scheduler pid in the log";
kill 'KILL', $pid;
wait_log(qr/scheduler process $pid for model "smol" exited unexpectedly/, 10)
    or die "the supervisor did not notice";
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"
--- grep_error_log eval
qr/srt: scheduler process \d+ owns model "smol"/
--- grep_error_log_out eval
qr/\A(?:srt: scheduler process \d+ owns model "smol"\n){2}\z/
--- error_log
srt: a parked request resumes for model "smol" with its body as parsed when it arrived



=== TEST 8: a request in flight when the scheduler dies fails cleanly (503 JSON), never hangs
--- init
package main;
Test::Srt::wait_ready();
kill_scheduler_after(0.3);
--- request eval
"POST /v1/completions\n$main::LONG"
--- error_code: 503
--- response_body_like chomp
"message":"Generation failed: scheduler process \d+ exited","type":"server_error"



=== TEST 9: and the next request is served again
--- init
package main;
scheduler_dies_mid_request();
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 9b: a request queued after the scheduler died, before its supervisor noticed, is submitted again and served by the successor
--- init
package main;
Test::Srt::wait_ready();
my ($helper) = child_pids(qr/cache manager process/);
my $old = scheduler_pid();
Test::More::ok($helper && $old, "found the helper ($helper) and its scheduler ($old)");
# the supervisor cannot notice the death while stopped: the request below is queued for a
# scheduler that is gone, and failed with the others when the supervisor wakes up
kill 'STOP', $helper;
kill 'KILL', $old;
my $waker = fork();
if ($waker == 0) {
    select undef, undef, undef, 1.0;
    kill 'CONT', $helper;
    POSIX::_exit(0);
}
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"
--- error_log eval
qr/request failed before a scheduler took it \(scheduler process \d+ exited[^)]*\): submitting it again/



=== TEST 10a: kill -9 of the helper (supervisor): the master respawns it, its scheduler hands over
--- init
package main;
Test::Srt::wait_ready();
my ($helper) = child_pids(qr/cache manager process/);
my $old = scheduler_pid();
Test::More::ok($helper && $old, "found the helper ($helper) and its scheduler ($old)");
kill 'KILL', $helper;
wait_log(qr/scheduler process $old for model "smol" exited/, 20)
    or Test::More::fail("the orphaned scheduler did not exit");
wait_log(qr/scheduler process (?!$old)\d+ owns model "smol"/, 20)
    or Test::More::fail("no new scheduler took over");
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"



=== TEST 10: kill -9 of a worker with a request in flight: the scheduler reclaims its slot
--- init
package main;
Test::Srt::wait_ready();
my $child = fork();
if ($child == 0) {
    Test::Srt::http_request('POST', '/v1/completions', $main::LONG);
    POSIX::_exit(0);
}
for (1 .. 200) { last if http_get('/v1/health') =~ /"running":1/; select undef, undef, undef, 0.05 }
my @workers = child_pids(qr/nginx: worker process/);
Test::More::ok(scalar @workers, "found the worker (@workers)");
kill 'KILL', @workers;
waitpid($child, 0);
# reclaim runs once a second, between steps; the 4000-token request alone would take far
# longer than these 6 s
for (1 .. 60) { last if http_get('/v1/health') =~ /"running":0,"queued":0,"slots_free":8,/; select undef, undef, undef, 0.1 }
--- request
GET /v1/health
--- response_body_like chomp
"running":0,"queued":0,"slots_free":8,



=== TEST 11: a file that is not a model: the scheduler fails to load it, requests get 503 with the reason
--- config
location /v1 {
    srt_model $TEST_NGINX_SERVER_ROOT/conf/nginx.conf name=junk;
}
--- init
Test::Srt::wait_scheduler_failed("junk");
--- request
POST /v1/completions
{"prompt": [1, 2, 3], "max_tokens": 1}
--- error_code: 503
--- response_headers
Retry-After: 1
--- response_body_like chomp
"message":"Model \\"junk\\" is not available: [^"]+","type":"server_error","param":null,"code":"model_unavailable"
--- response_body_unlike
servroot/conf



=== TEST 12: several models: a scheduler's death costs its supervisor no CPU (each scheduler holds only its own lifeline)
--- config
location /a {
    srt_model $TEST_NGINX_SRT_TINY name=a;
    srt_threads 1;
    srt_wait_ready 60s;
}
location /b {
    srt_model $TEST_NGINX_SRT_TINY name=b;
    srt_threads 1;
    srt_wait_ready 60s;
}
--- init
package main;
Test::Srt::wait_ready('/a');
Test::Srt::wait_ready('/b');
# the CPU seconds (user + system) process $pid has used
sub cpu_secs {
    open my $fh, '<', "/proc/$_[0]/stat" or return -1;
    my @f = split ' ', (<$fh> // '') =~ s/^.*\) //sr;
    return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}
my ($sup) = child_pids(qr/cache manager process/);
Test::More::ok($sup, "found the supervisor ($sup)");
# the scheduler forked first: the later one inherited the supervisor's end of its lifeline
my ($first) = error_log() =~ /srt: scheduler process (\d+) started for model/;
kill 'KILL', $first;
wait_log(qr/scheduler process $first for model "\w" exited unexpectedly/, 10);
wait_log(qr/scheduler process \d+ owns model(?s:.*)scheduler process \d+ owns model(?s:.*)scheduler process \d+ owns model/, 20);
my $t0 = cpu_secs($sup);
Time::HiRes::sleep(1.5);
my $used = cpu_secs($sup) - $t0;
Test::More::cmp_ok($used, '<', 0.3, "the supervisor used $used CPU seconds in the 1.5 s after the respawn");
--- request
POST /b/completions
{"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"
