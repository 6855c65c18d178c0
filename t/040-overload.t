# Back-pressure: when every request slot is taken, new requests get 503 + Retry-After at
# once (no unbounded queue), while the admitted ones complete.
# Every block starts from a fresh nginx and fills the slots itself.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

our $Dir = srt_dir();
# long enough that the first still runs when the test's own request comes, on a fast machine too
our $LONG = '{"prompt": "Once upon a time", "max_tokens": 600, "temperature": 0, "ignore_eos": true}';

# Two long requests in the background (one running, one queued: every slot taken);
# returns their pids once /health shows no free slot. The second starts once the first
# runs, so that which one runs is known.
sub fill_slots {
    Test::Srt::wait_ready();
    my ($first) = start_clients($Dir, 'bg1', '/v1/completions', $LONG);
    for (1 .. 600) {
        last if http_get('/v1/health') =~ /"running":1,/;
        select undef, undef, undef, 0.01;
    }
    my ($second) = start_clients($Dir, 'bg2', '/v1/completions', $LONG);
    for (1 .. 600) {
        return ($first, $second) if http_get('/v1/health') =~ /"slots_free":0/;
        select undef, undef, undef, 0.01;
    }
    die "the background requests never filled the slots";
}

# one request runs, one waits
our @Overload = (srt_max_running_requests => 1, srt_max_queued_requests => 1, srt_max_total_tokens => 2048,
                 srt_context_length => 1024, srt_retry_after => '2s');

srt_defaults(timeout => 60, config => srt_location('/v1', @Overload));

run_tests();

__DATA__

=== TEST 1: the model loads
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: both slots busy: the next request gets 503 at once
--- init
package main;
fill_slots();
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2}
--- timeout: 2
--- error_code: 503
--- response_headers
Retry-After: 2
Content-Type: application/json
--- response_body
{"error":{"message":"The server is overloaded: too many requests in flight; retry later","type":"server_error","param":null,"code":"overloaded"}}
--- error_log
srt: model "smol" is overloaded: no free request slot



=== TEST 3: the admitted requests complete normally
--- init
package main;
my @pids = fill_slots();
my ($st) = Test::Srt::http_request('POST', '/v1/completions', '{"prompt": "Hello", "max_tokens": 2}');
Test::More::is($st, 503, "a third request is refused while both slots are busy");
my @out = (wait_clients($main::Dir, 'bg1', $pids[0]), wait_clients($main::Dir, 'bg2', $pids[1]));
for my $i (0, 1) {
    Test::More::like($out[$i], qr/^HTTP\/1\.\d 200 .*"completion_tokens":600,/s, "background request $i completed");
}
--- request
GET /v1/health
--- response_body_like chomp
"running":0,"queued":0,"slots_free":2,"requests_total":2\}



=== TEST 4: srt_max_queued_requests 0 means that no request waits (it used to mean 16)
--- config eval
Test::Srt::srt_location('/v1', @main::Overload, srt_max_queued_requests => 0)
--- init
package main;
Test::Srt::wait_ready();
my @pids = start_clients($main::Dir, 'bg0', '/v1/completions', $main::LONG);
for (1 .. 600) {
    last if http_get('/v1/health') =~ /"running":1,/;
    select undef, undef, undef, 0.01;
}
Test::More::like(http_get('/v1/health'), qr/"slots_free":0/, "one running request takes the only slot");
$main::BG0 = \@pids;
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2}
--- timeout: 2
--- error_code: 503
--- response_body_like chomp
"code":"overloaded"
