# Tool calls in the formats of the major template families (Hermes/Qwen2.5, Llama 3.1 JSON,
# Mistral [TOOL_CALLS], DeepSeek V3 as DeepSeek-R1's template teaches it; pythonic, set by the
# directive: no pythonic template is in the test data) chosen by srt_tool_call_parser auto from
# each chat template (tiny-qwen2-tools: from the model's own tokenizer_config.json), tool-call
# deltas streamed as OpenAI streams them (joined = non-streamed), assistant tool_calls and tool
# messages round-tripping through the real templates as transformers renders them, and
# reasoning_content split off by srt_reasoning_parser (qwen3, deepseek-r1). The model is
# tiny-qwen2 with the real templates (t/fixtures/templates/*.json) set by srt_chat_template;
# t/lib/tools_e2e.py does the checking with the openai client, jinja2 and HF tokenizers.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();
use Encode ();

BEGIN {
    my $dir = Test::Srt::srt_dir('tools');
    for my $name (qw(qwen2.5 llama-3.1 mistral-v0.3 qwen3 deepseek-r1)) {
        open my $in, '<', "$FindBin::Bin/fixtures/templates/$name.json" or die "$name: $!";
        my $fix = JSON::PP->new->utf8->decode(do { local $/; <$in> });
        open my $out, '>:raw', "$dir/$name.jinja" or die "$dir/$name.jinja: $!";
        print $out Encode::encode('UTF-8', $fix->{source});
        close $out;
    }
    $ENV{TEST_NGINX_TPL_DIR} = $dir;
    $ENV{TEST_NGINX_TINY_QWEN2} = "$ENV{TEST_NGINX_SRT_MODEL_DIR}/tiny-qwen2";
}

master_on();
log_level('info');

srt_defaults(timeout => 300, config => <<'EOF2');
srt_device cpu;
srt_threads 1;
srt_context_length 1024;
srt_max_total_tokens 4096;
srt_wait_ready 60s;
location /hermes/v1/ {
    srt_model $TEST_NGINX_TINY_QWEN2 name=hermes;
    srt_chat_template $TEST_NGINX_TPL_DIR/qwen2.5.jinja;
}
location /llama/v1/ {
    srt_model $TEST_NGINX_TINY_QWEN2 name=llama3;
    srt_chat_template $TEST_NGINX_TPL_DIR/llama-3.1.jinja;
}
location /mistral/v1/ {
    srt_model $TEST_NGINX_TINY_QWEN2 name=mistral;
    srt_chat_template $TEST_NGINX_TPL_DIR/mistral-v0.3.jinja;
    srt_tool_call_parser auto;
}
location /dsv3/v1/ {
    srt_model $TEST_NGINX_TINY_QWEN2 name=deepseekv3;
    srt_chat_template $TEST_NGINX_TPL_DIR/deepseek-r1.jinja;
}
location /pythonic/v1/ {
    srt_model $TEST_NGINX_TINY_QWEN2 name=pythonic;
    srt_chat_template $TEST_NGINX_TPL_DIR/qwen2.5.jinja;
    srt_tool_call_parser pythonic;
}
location /own/v1/ {
    srt_model $TEST_NGINX_SRT_MODEL_DIR/tiny-qwen2-tools name=own;
}
location /think/v1/ {
    srt_model $TEST_NGINX_TINY_QWEN2 name=think;
    srt_chat_template $TEST_NGINX_TPL_DIR/qwen3.jinja;
    srt_reasoning_parser qwen3;
}
location /r1/v1/ {
    srt_model $TEST_NGINX_TINY_QWEN2 name=r1;
    srt_chat_template $TEST_NGINX_TPL_DIR/deepseek-r1.jinja;
    srt_reasoning_parser deepseek-r1;
    srt_tool_call_parser hermes;
}
EOF2

run_tests();

__DATA__

=== TEST 1: the openai client against every format, streamed and not, and reasoning
--- init
package main;   # the real Test::Nginx evals init in its own package
my $port = server_port();
for my $loc (qw(hermes llama mistral dsv3 pythonic own think r1)) {
    Test::Srt::wait_ready("/$loc/v1", 120);
}
my @lines = `python3 $FindBin::Bin/lib/tools_e2e.py http://127.0.0.1:$port $ENV{TEST_NGINX_TINY_QWEN2} $ENV{TEST_NGINX_TPL_DIR} 2>&1`;
Test::More::is($?, 0, "tools_e2e.py ran") or Test::More::diag(join '', @lines);
my $n = tap_lines('tools', @lines);
Test::More::ok($n == 54, "tools: all checks reported ($n)");
--- request
GET /hermes/v1/models
--- response_body_like chomp
"id":"hermes"
--- no_error_log
[alert]
[emerg]
srt_model "own": the chat template names no single tool-call format
srt_model "deepseekv3": the chat template names no single tool-call format
