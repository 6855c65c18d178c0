# A scheduler that stops stepping (SIGSTOP, wedged) is seen: its heartbeat in shared memory
# goes stale, /health answers 503 and srt:scheduler_up is 0 past srt_watchdog_timeout, and
# its supervisor kills it then (SGLang's --watchdog-timeout) so that a new one serves.
# Requests end within srt_queue_timeout / srt_request_timeout with a clear error, and what
# was withdrawn before a scheduler took it is counted.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use POSIX ();

master_on();
log_level('info');

our $Dir = srt_dir();

# Generations that must outlast a deadline ask for 4000 tokens (context 4096): 31 s here (~650
# in the first 3 s, slower as the context grows), so more than srt_request_timeout's 3 s on a
# CPU ten times as fast; 1900 tokens (10.5 s here) left 1.2x to spare on one three times as fast.
our $LONG = '{"prompt": "Once", "max_tokens": 4000, "temperature": 0, "ignore_eos": true}';

srt_defaults(timeout => 60, config => srt_location('/v1/', srt_max_total_tokens => 4096, srt_context_length => 4096,
                                                   srt_max_running_requests => 1,
                                                   srt_watchdog_timeout => '2s', srt_queue_timeout => '1500ms',
                                                   srt_request_timeout => '3s') . <<'EOF2');
location = /metrics {
    srt_metrics on;
}
EOF2

run_tests();

__DATA__

=== TEST 1: scheduler and supervisor stopped: /health 503 and scheduler_up 0; the supervisor, resumed, kills it and a new one serves
--- init
package main;
Test::Srt::wait_ready();
my ($st, $b) = Test::Srt::http_request('GET', '/v1/health');
Test::More::is($st, 200, "healthy at first");
my $sched = Test::Srt::scheduler_pid();
my ($helper) = child_pids(qr/cache manager process/);
kill 'STOP', $helper, $sched;
# a request sent now waits in the channel: srt_queue_timeout ends it
my ($qst, $qb, $qraw) = Test::Srt::http_request('POST', '/v1/completions', '{"prompt": "Hi", "max_tokens": 2}');
Test::More::is($qst, 503, "a request sent to the stopped scheduler: 503 after srt_queue_timeout");
Test::More::like($qb, qr/"message":"Request timed out: no token for the request after 1500 ms \(srt_queue_timeout\)".*"code":"queue_timeout"/,
                 "... naming srt_queue_timeout");
Test::More::like($qraw, qr/\r\nRetry-After: \d+\r\n/, "... with Retry-After");
(undef, $b) = Test::Srt::http_request('GET', '/metrics');
Test::More::like($b, qr/srt:http_requests_withdrawn_total\{model_name="smol"\} 1\n/, "metrics: it was withdrawn before a scheduler took it");
select undef, undef, undef, 1.5;
($st, $b) = Test::Srt::http_request('GET', '/v1/health');
Test::More::is($st, 503, "/health: 503 while the scheduler is stopped");
Test::More::like($b, qr/"message":"The scheduler of model \\"smol\\" has not responded for \d+ ms \(srt_watchdog_timeout 2000 ms\)"/,
                 "/health names the stale heartbeat");
(undef, $b) = Test::Srt::http_request('GET', '/metrics');
Test::More::like($b, qr/srt:scheduler_up\{model_name="smol"\} 0\n/, "metrics: scheduler_up 0");
Test::More::like($b, qr/srt:scheduler_heartbeat_age_seconds\{model_name="smol"\} [3-9]\.\d{3}\n/, "metrics: the heartbeat's age");
kill 'CONT', $helper;
Test::More::ok(wait_log(qr/scheduler process $sched for model "smol" has not stepped for \d+ ms \(srt_watchdog_timeout 2000 ms\): killing it/, 10),
               "the supervisor kills the stopped scheduler");
Test::More::ok(eval { Test::Srt::wait_ready('/v1', 30) }, "a new scheduler serves") or Test::More::diag($@);
Test::More::isnt(Test::Srt::scheduler_pid(), $sched, "... another process");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: a busy scheduler keeps its heartbeat: a generation busy past srt_watchdog_timeout does not look stale
--- init
package main;
Test::Srt::wait_ready();
# busy for the whole 2.5 s below (until srt_request_timeout ends it at 3 s), longer than the
# 2 s watchdog timeout: 150 tokens took 0.6 s here, too short for a stale heartbeat to show
my @pids = start_clients($main::Dir, 'busy', '/v1/completions', $main::LONG);
my $bad = 0;
for (1 .. 25) {
    my ($st) = Test::Srt::http_request('GET', '/v1/health');
    $bad++ if $st != 200;
    select undef, undef, undef, 0.1;
}
Test::More::is($bad, 0, "/health stayed 200 while the scheduler worked");
wait_clients($main::Dir, 'busy', @pids);
Test::More::unlike(Test::Srt::error_log(), qr/killing it/, "no watchdog kill");
--- request
GET /v1/health
--- response_body_like chomp
"status":"ok"



=== TEST 3: srt_request_timeout ends a long generation with 504 JSON
--- init
package main;
Test::Srt::wait_ready();
--- request
POST /v1/completions
{"prompt": "Once", "max_tokens": 4000, "temperature": 0, "ignore_eos": true}
--- error_code: 504
--- response_body_like chomp
^\{"error":\{"message":"Request timed out: the request took longer than 3000 ms \(srt_request_timeout\)","type":"server_error","param":null,"code":"request_timeout"\}\}$



=== TEST 4: ... and a stream with an SSE error event and [DONE] after what it sent
--- init
package main;
Test::Srt::wait_ready();
--- request
POST /v1/completions
{"prompt": "Once", "max_tokens": 4000, "temperature": 0, "ignore_eos": true, "stream": true}
--- response_body_like chomp
^data: \{.*"text":.*\n\ndata: \{"error":\{"message":"the request took longer than 3000 ms \(srt_request_timeout\)".*\n\ndata: \[DONE\]\n\n$



=== TEST 5: srt_queue_timeout: a request waiting behind another (max running 1) gets 503 with Retry-After
--- init
package main;
Test::Srt::wait_ready();
my @pids = start_clients($main::Dir, 'hog', '/v1/completions', $main::LONG);   # ended by srt_request_timeout
my $deadline = time + 10;
while (time < $deadline) {
    my (undef, $b) = Test::Srt::http_request('GET', '/v1/health');
    last if $b =~ /"running":1/;
    select undef, undef, undef, 0.02;
}
my ($st, $b, $raw) = Test::Srt::http_request('POST', '/v1/completions', '{"prompt": "Hi", "max_tokens": 2}');
Test::More::is($st, 503, "the waiting request: 503");
Test::More::like($b, qr/"message":"Request timed out: no token for the request after 1500 ms \(srt_queue_timeout\)".*"code":"queue_timeout"/,
                 "... naming srt_queue_timeout");
Test::More::like($raw, qr/\r\nRetry-After: \d+\r\n/, "... with Retry-After");
wait_clients($main::Dir, 'hog', @pids);
# the scheduler drops the withdrawn request when it next looks at it
for (1 .. 100) {
    my (undef, $h) = Test::Srt::http_request('GET', '/v1/health');
    last if $h =~ /"running":0,"queued":0,/;
    select undef, undef, undef, 0.1;
}
--- request
GET /v1/health
--- response_body_like chomp
"running":0,"queued":0,
