# Tensor parallelism end to end (srt_tp_size 2, CPU communicator): the scheduler process is
# rank 0 and forks rank 1; greedy continuations equal HF transformers' (the golden fixture
# t/fixtures/golden/tiny-llama.json, tokens decoded with HF tokenizers), so tp=2 == tp=1.
# kill -9 of a rank: in-flight requests fail with a 503 JSON error (never hang), the group
# is torn down and restarted, and later requests are served again.
# Every block starts from a fresh nginx; blocks that kill a rank wait for the group first.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use POSIX ();
use JSON::PP ();

master_on();
log_level('info');

# the pid of the newest rank `rank` of the group, from the log line every rank writes when ready
sub rank_pid {
    my ($rank) = @_;
    my @pids = error_log() =~ /tp rank $rank of 2 ready \(pid (\d+)\)/g;
    return $pids[-1];
}

# Kill rank 1 as soon as a 2000-token request runs (as /health shows): the request fails
# with a 503 JSON error.
sub kill_rank_mid_request {
    my ($check) = @_;
    Test::Srt::wait_ready();
    rank_pid(1) or die "no rank 1 pid in the log";
    my $killer = fork();
    if ($killer == 0) {
        for (1 .. 2000) {
            last if Test::Srt::http_get('/v1/health') =~ /"running":1,/;
            select undef, undef, undef, 0.005;
        }
        kill 'KILL', rank_pid(1);
        POSIX::_exit(0);
    }
    return $killer unless $check;
    my ($st, $body) = Test::Srt::http_request('POST', '/v1/completions',
        '{"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0, "ignore_eos": true}');
    waitpid($killer, 0);
    Test::More::is($st, 503, "the request in flight when rank 1 died: 503");
    Test::More::like($body, qr/"message":"Generation failed: [^"]+","type":"server_error"/, "... with the reason");
}

srt_defaults(timeout => 60, config => srt_location('/v1', srt_model => '$TEST_NGINX_SRT_TINY name=tiny', srt_threads => 1,
                                                  srt_tp_size => 2, srt_context_length => 2048,
                                                  srt_max_total_tokens => 8192));

run_tests();

__DATA__

=== TEST 1: tp=2 greedy = HF (golden case "1, 2, 3, 4, 5, 6,", 12 tokens)
--- request
POST /v1/completions
{"model": "tiny", "prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" Each endogenousYou Lights Religious Vermont free Bettyviol imag',site","logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":17,"completion_tokens":12,
--- error_log eval
[qr/tp rank 1 of 2 ready \(pid \d+\)/]



=== TEST 2: tp=2 streamed: SSE events then [DONE]; their texts joined = HF's greedy text
--- init
package main;
# Tokens that arrive together share an event: on a fast machine all 12 may come in the one
# event that carries the finish reason, so there may be no event before it.
Test::Srt::wait_ready();
my ($st, $body) = Test::Srt::http_request('POST', '/v1/completions',
    '{"prompt": [1604, 803, 24, 81, 28, 278, 727, 472, 1003], "max_tokens": 12, "temperature": 0, "stream": true}');
my $text = join '', map { JSON::PP::decode_json($_)->{choices}[0]{text} } $body =~ /^data: (\{.*\})$/mg;
Test::More::is($text, qq( unavoidable fitted \x{b5}m mortalityendix "[ unavoidable peri cholera accused Lange Lights),
               "the streamed texts joined are HF's 12 greedy tokens");
--- request
POST /v1/completions
{"prompt": [1604, 803, 24, 81, 28, 278, 727, 472, 1003], "max_tokens": 12, "temperature": 0, "stream": true}
--- response_body_like chomp
^(data: \{[^\n]*"finish_reason":null\}\]\}\n\n)*data: \{[^\n]*"finish_reason":"length"\}\]\}\n\ndata: \[DONE\]\n\n$
--- no_error_log
tensor-parallel group lost



=== TEST 3: kill -9 of rank 1 while idle: the group restarts, the next request is served (= HF)
--- init
package main;
Test::Srt::wait_ready();
my $pid = rank_pid(1) or die "no rank 1 pid in the log";
kill 'KILL', $pid;
# the scheduler notices within a second and exits; its supervisor restarts the group
wait_log(qr/tensor-parallel group lost/, 10);
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" Each endogenousYou Lights Religious Vermont free Bettyviol imag',site","logprobs":null,"finish_reason":"length"
--- error_log eval
[qr/tensor-parallel group lost \(tp rank 1 \(pid \d+\) was killed by signal 9\)/]



=== TEST 4: kill -9 of rank 1 mid-generation: the request fails cleanly (503 JSON), never hangs
--- init
package main;
kill_rank_mid_request(0);
--- request
POST /v1/completions
{"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0, "ignore_eos": true}
--- error_code: 503
--- response_body_like chomp
"message":"Generation failed: [^"]+","type":"server_error"
--- error_log eval
[qr/tensor-parallel group lost \(.*rank 1 \(pid \d+\)/]



=== TEST 5: and the restarted group serves again (= HF)
--- init
package main;
kill_rank_mid_request(1);
--- request
POST /v1/completions
{"prompt": [1604, 803, 24, 81, 28, 278, 727, 472, 1003], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" unavoidable fitted (?:\\u00b5|\xc2\xb5)m mortalityendix \\"\[ unavoidable peri cholera accused Lange Lights","logprobs":null,"finish_reason":"length"
--- error_log eval
[qr/tensor-parallel group lost \(.*rank 1 \(pid \d+\)/]
