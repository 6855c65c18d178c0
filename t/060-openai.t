# End to end with the official openai Python client (PyPI), streamed and not streamed,
# against SmolLM2 served by nginx.
# Every block starts from a fresh nginx (the real Test::Nginx's default).
use Test::Nginx::Socket 'no_plan';

BEGIN {
    $ENV{TEST_NGINX_SRT_MODULE} ||= "$ENV{PWD}/build/nginx/ngx_http_srt_module.so";
    $ENV{TEST_NGINX_SRT_MODEL} ||= ($ENV{SRT_MODEL_DIR} || "$ENV{PWD}/.cache/models")
                                   . "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

master_on();
log_level('info');

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value("main_config", "load_module $ENV{TEST_NGINX_SRT_MODULE};")
        unless defined $block->main_config;
    $block->set_value("config", <<'EOF2') unless defined $block->config;
location /v1/ {
    srt_model $TEST_NGINX_SRT_MODEL name=smollm2;
    srt_device cpu;
    srt_threads 2;
    srt_context_length 512;
    srt_max_total_tokens 2048;
    srt_wait_ready 60s;
}
EOF2
    $block->set_value("timeout", 120) unless defined $block->timeout;
});

run_tests();

__DATA__

=== TEST 1: the model loads
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1}
--- response_body_like
"finish_reason":"length"



=== TEST 2: the openai client: chat, streamed chat, completions, models, errors
--- init
package main;   # the real Test::Nginx evals init in its own package
my $port = Test::Nginx::Socket::server_port();
my @lines = `python3 $ENV{PWD}/t/lib/openai_e2e.py http://127.0.0.1:$port/v1 smollm2 2>&1`;
Test::More::is($?, 0, "openai_e2e.py ran") or Test::More::diag(join '', @lines);
my $n = 0;
for (@lines) {
    chomp;
    if (/^ok (.*)/) { Test::More::pass("openai: $1"); $n++ }
    elsif (/^not ok (.*)/) { Test::More::fail("openai: $1"); $n++ }
}
Test::More::ok($n == 14, "openai: all checks reported ($n)");
--- request
GET /v1/models
--- response_body_like
"id":"smollm2"
