# Tensor parallelism end to end (srt_tp_size 2, CPU communicator): the scheduler process is
# rank 0 and forks rank 1; greedy continuations equal HF transformers' (the golden fixture
# t/fixtures/golden/tiny-llama.json, tokens decoded with HF tokenizers), so tp=2 == tp=1.
# kill -9 of a rank: in-flight requests fail with a 503 JSON error (never hang), the group
# is torn down and restarted, and later requests are served again.
# Blocks with the same config share one nginx (and one loaded model), under this harness
# and the real Test::Nginx alike (TEST_NGINX_FORCE_RESTART_ON_TEST=0; set it to 1 to
# restart nginx for every block, the real module's default).
BEGIN { $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST} //= 0 }
use Test::Nginx::Socket 'no_plan';
use POSIX ();

BEGIN {
    $ENV{TEST_NGINX_SRT_MODULE} ||= "$ENV{PWD}/build/nginx/ngx_http_srt_module.so";
    $ENV{TEST_NGINX_SRT_TINY} ||= ($ENV{SRT_MODEL_DIR} || "$ENV{PWD}/.cache/models") . "/tiny-llama";
}

master_on();
log_level('info');

our $Log = "${\ Test::Nginx::Socket::server_root()}/logs/error.log";

# the pid of the newest rank `rank` of the group, from the log line every rank writes when ready
sub rank_pid {
    my ($rank) = @_;
    open my $fh, '<', $Log or return undef;
    my $pid;
    while (<$fh>) { $pid = $1 if /tp rank $rank of 2 ready \(pid (\d+)\)/ }
    return $pid;
}

sub count_log {
    my ($re) = @_;
    open my $fh, '<', $Log or return 0;
    my $n = 0;
    while (<$fh>) { $n++ if $_ =~ $re }
    return $n;
}

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value("main_config", "load_module $ENV{TEST_NGINX_SRT_MODULE};")
        unless defined $block->main_config;
    $block->set_value("config", <<'EOF2') unless defined $block->config;
location /v1 {
    srt_model $TEST_NGINX_SRT_TINY name=tiny;
    srt_device cpu;
    srt_threads 1;
    srt_tp_size 2;
    srt_context_length 2048;
    srt_max_total_tokens 8192;
    srt_wait_ready 60s;
}
EOF2
    $block->set_value("timeout", 60) unless defined $block->timeout;
});

run_tests();

__DATA__

=== TEST 1: tp=2 greedy = HF (golden case "1, 2, 3, 4, 5, 6,", 12 tokens)
--- request
POST /v1/completions
{"model": "tiny", "prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like
"text":" Each endogenousYou Lights Religious Vermont free Bettyviol imag',site","logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":17,"completion_tokens":12,
--- error_log eval
[qr/tp rank 1 of 2 ready \(pid \d+\)/]



=== TEST 2: tp=2 streamed: SSE events then [DONE] (tokens that arrive together may share an event)
--- request
POST /v1/completions
{"prompt": [1604, 803, 24, 81, 28, 278, 727, 472, 1003], "max_tokens": 12, "temperature": 0, "stream": true}
--- response_body_like
^(data: \{[^\n]*"finish_reason":null\}\]\}\n\n)+data: \{[^\n]*"finish_reason":"length"\}\]\}\n\ndata: \[DONE\]\n\n$
--- no_error_log
tensor-parallel group lost



=== TEST 3: kill -9 of rank 1 while idle: the group restarts, the next request is served (= HF)
--- init
package main;   # the real Test::Nginx evals init in its own package
my $pid = main::rank_pid(1) or die "no rank 1 pid in the log";
kill 'KILL', $pid;
# the scheduler notices within a second and exits; its supervisor restarts the group
for (1 .. 200) {
    last if main::count_log(qr/tensor-parallel group lost/) >= 1;
    select undef, undef, undef, 0.05;
}
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like
"text":" Each endogenousYou Lights Religious Vermont free Bettyviol imag',site","logprobs":null,"finish_reason":"length"
--- error_log eval
[qr/tensor-parallel group lost \(tp rank 1 \(pid \d+\) was killed by signal 9\)/]



=== TEST 4: kill -9 of rank 1 mid-generation: the request fails cleanly (503 JSON), never hangs
--- init
package main;   # the real Test::Nginx evals init in its own package
my $old = main::rank_pid(1) or die "no rank 1 pid in the log";
if (my $child = fork()) {
} else {
    select undef, undef, undef, 0.7;
    kill 'KILL', main::rank_pid(1);
    POSIX::_exit(0);
}
--- request
POST /v1/completions
{"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0, "ignore_eos": true}
--- error_code: 503
--- response_body_like
"message":"Generation failed: [^"]+","type":"server_error"
--- error_log eval
[qr/tensor-parallel group lost \(.*rank 1 \(pid \d+\)/]



=== TEST 5: and the restarted group serves again (= HF)
--- request
POST /v1/completions
{"prompt": [1604, 803, 24, 81, 28, 278, 727, 472, 1003], "max_tokens": 12, "temperature": 0}
--- response_body_like
"text":" unavoidable fitted (?:\\u00b5|\xc2\xb5)m mortalityendix \\"\[ unavoidable peri cholera accused Lange Lights","logprobs":null,"finish_reason":"length"
