# Hostile input over HTTP: scripts/fuzz_http.py sends malformed and mutated requests (wrong
# types, out-of-range and huge values, deep nesting, invalid UTF-8, truncated JSON, random
# bytes, wrong methods and content types, bodies cut short, clients that hang up mid-answer)
# and checks every answer: 200 with a completion, or 400/404/405/413/503 with OpenAI's error
# JSON, no hang. Afterwards no request slot is left in use, no process crashed and the
# worker's memory did not grow. 400 requests by default; SRT_SOAK=1 sends 20,000.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

our $N = $ENV{SRT_SOAK} ? 20000 : 400;
our $SEED = $ENV{SRT_FUZZ_SEED} // int(rand(1 << 30));

sub rss_kb {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/status" or return 0;
    while (<$fh>) { return $1 if /^VmRSS:\s+(\d+) kB/ }
    return 0;
}

sub fuzz {
    Test::Srt::wait_ready();
    my ($worker) = child_pids(qr/worker process/);
    my $sched = scheduler_pid();
    # a first round warms the worker's pools and caches: growth is measured after it
    my $warm = `python3 $FindBin::Bin/../scripts/fuzz_http.py --port @{[Test::Srt::port()]} --iterations 1500 --seed $SEED 2>&1`;
    Test::More::is($?, 0, "warm-up round (seed $SEED)") or Test::More::diag($warm);
    my $before = rss_kb($worker);
    my $out = `python3 $FindBin::Bin/../scripts/fuzz_http.py --port @{[Test::Srt::port()]} --iterations $N --seed @{[$SEED + 1]} 2>&1`;
    Test::More::is($?, 0, "$N hostile requests, every answer well-formed, no slot left in use (seed "
                   . ($SEED + 1) . ")") or Test::More::diag($out);
    my $after = rss_kb($worker);
    # a smoke check by default (the pools still settle); the soak's 20,000 requests make it a
    # leak check: a leak of 200 bytes per request would show
    Test::More::cmp_ok($after - $before, '<', $ENV{SRT_SOAK} ? 2048 : 4096,
                       "the worker's memory did not grow ($before kB -> $after kB)");
    Test::More::is(scheduler_pid(), $sched, "the same scheduler process served it all");
    Test::More::ok(Test::Srt::alive($worker), "the same worker process served it all");
}

srt_defaults(timeout => 120, config => srt_location('/v1', client_max_body_size => '16k'));

run_tests();

__DATA__

=== TEST 1: hostile requests get well-formed answers and leave nothing behind
--- init
package main;
fuzz();
--- request
GET /v1/health
--- response_body_like chomp
"running":0,"queued":0,
--- no_error_log
[alert]
[crit]
[emerg]
exited unexpectedly
