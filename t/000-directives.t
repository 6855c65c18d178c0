# Every srt_* directive's value is checked by nginx -t, with a message that names the
# directive and the value.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

BEGIN {
    my $dir = Test::Srt::srt_dir();
    # a chat template the engine cannot compile
    $ENV{TEST_NGINX_BAD_TEMPLATE} = "$dir/bad.jinja";
    open my $fh, '>', $ENV{TEST_NGINX_BAD_TEMPLATE} or die $!;
    print $fh "{{ messages[0]['content'] }}\n{% for x in %}{% endfor %}\n";
    close $fh;
    # a hook spec with a field of the wrong type, and one that is not JSON
    $ENV{TEST_NGINX_BAD_HOOKS} = "$dir/bad-hooks.json";
    open $fh, '>', $ENV{TEST_NGINX_BAD_HOOKS} or die $!;
    print $fh '{"forward_hooks": [{"target_modules": 3, "hook_factory": "x.so:f"}]}';
    close $fh;
    $ENV{TEST_NGINX_BROKEN_HOOKS} = "$dir/broken-hooks.json";
    open $fh, '>', $ENV{TEST_NGINX_BROKEN_HOOKS} or die $!;
    print $fh '{"forward_hooks": [';
    close $fh;
}

srt_defaults();

run_tests();

__DATA__

=== TEST 1: srt_model with a missing file
--- config
location /v1 { srt_model /nonexistent/model.gguf; }
--- must_die
--- error_log
srt_model "/nonexistent/model.gguf": cannot read the model



=== TEST 2: srt_model with a bad parameter
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL served=x; }
--- must_die
--- error_log
srt_model: invalid parameter "served=x", expected "name=..."



=== TEST 3: srt_model at server level is not allowed
--- config
srt_model $TEST_NGINX_SRT_MODEL;
--- must_die
--- error_log
"srt_model" directive is not allowed here



=== TEST 4: the same served name for two different models
--- config
location /a { srt_model $TEST_NGINX_SRT_MODEL name=m; }
location /b { srt_model $TEST_NGINX_SERVER_ROOT/conf/nginx.conf name=m; }
--- must_die
--- error_log
srt_model name "m" is already used for



=== TEST 5: srt_model twice in one location
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_model $TEST_NGINX_SRT_MODEL; }
--- must_die
--- error_log
"srt_model" directive is duplicate



=== TEST 6: srt_device
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_device tpu; }
--- must_die
--- error_log
"srt_device" must be "auto", "cpu" or "cuda", not "tpu"



=== TEST 7: srt_threads not a number
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_threads many; }
--- must_die
--- error_log
"srt_threads" must be an integer between 1 and 1024 or "auto", not "many"



=== TEST 8: srt_threads zero
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_threads 0; }
--- must_die
--- error_log
"srt_threads" must be an integer between 1 and 1024 or "auto", not "0"



=== TEST 9: srt_context_length too small
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_context_length 8; }
--- must_die
--- error_log
"srt_context_length" must be an integer between 16 and 1048576, not "8"



=== TEST 10: srt_max_running_requests
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_max_running_requests -3; }
--- must_die
--- error_log
"srt_max_running_requests" must be an integer between 1 and 4096, not "-3"



=== TEST 11: srt_max_queued_requests
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_max_queued_requests 1e3; }
--- must_die
--- error_log
"srt_max_queued_requests" must be an integer between 0 and 65536, not "1e3"



=== TEST 12: srt_max_total_tokens
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_max_total_tokens 4; }
--- must_die
--- error_log
"srt_max_total_tokens" must be an integer of at least 16, not "4"



=== TEST 13: srt_mem_fraction_static above 1
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_mem_fraction_static 1.5; }
--- must_die
--- error_log
"srt_mem_fraction_static" must be a number between 0 and 1 (exclusive), not "1.5"



=== TEST 14: srt_mem_fraction_static not a number
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_mem_fraction_static half; }
--- must_die
--- error_log
"srt_mem_fraction_static" must be a number between 0 and 1 (exclusive), not "half"



=== TEST 15: srt_chunked_prefill_size
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_chunked_prefill_size 0; }
--- must_die
--- error_log
"srt_chunked_prefill_size" must be an integer between 1 and 1048576 or -1 (off), not "0"



=== TEST 16: srt_schedule_policy
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_schedule_policy random; }
--- must_die
--- error_log
"srt_schedule_policy" must be "fcfs" or "lpm", not "random"



=== TEST 17: srt_tp_size
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_tp_size 128; }
--- must_die
--- error_log
"srt_tp_size" must be an integer between 1 and 64, not "128"



=== TEST 18: srt_chat_template missing file
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_chat_template /nonexistent/t.jinja; }
--- must_die
--- error_log
"srt_chat_template": cannot read "/nonexistent/t.jinja"



=== TEST 19: srt_chat_template that does not compile: nginx -t reports the line
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_chat_template $TEST_NGINX_BAD_TEMPLATE; }
--- must_die
--- error_log eval
qr/"srt_chat_template" "[^"]+bad\.jinja": chat template line 2: /



=== TEST 20: srt_forward_hooks missing file
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_forward_hooks /nonexistent/hooks.json; }
--- must_die
--- error_log
"srt_forward_hooks": cannot read "/nonexistent/hooks.json"



=== TEST 21: srt_radix_cache takes on|off
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_radix_cache maybe; }
--- must_die
--- error_log
invalid value "maybe" in "srt_radix_cache" directive, it must be "on" or "off"



=== TEST 21b: srt_grammar_jump_forward takes on|off
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_grammar_jump_forward yes; }
--- must_die
--- error_log
invalid value "yes" in "srt_grammar_jump_forward" directive, it must be "on" or "off"



=== TEST 21c: srt_weights_mmap takes on|off
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_weights_mmap 1; }
--- must_die
--- error_log
invalid value "1" in "srt_weights_mmap" directive, it must be "on" or "off"



=== TEST 22: srt_page_size
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_page_size 0; }
--- must_die
--- error_log
"srt_page_size" must be an integer between 1 and 4096, not "0"



=== TEST 23: srt_model name with a quote
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL 'name=a"b'; }
--- must_die
--- error_log
srt_model: invalid model name "a"b"



=== TEST 24: every directive with a valid value loads (master off: no scheduler, clear 503)
--- config
location /v1 {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_device cpu; srt_threads 2; srt_context_length 2048;
    srt_max_running_requests 8; srt_max_queued_requests 16; srt_max_total_tokens 4096;
    srt_mem_fraction_static 0.8; srt_chunked_prefill_size 512; srt_schedule_policy lpm;
    srt_tp_size 1; srt_radix_cache off; srt_page_size 1; srt_retry_after 5s;
    srt_numerics fast; srt_kv_cache_dtype f32; srt_grammar_jump_forward on; srt_weights_mmap on;
}
--- request
POST /v1/chat/completions
{"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
--- error_code: 503
--- response_headers
Retry-After: 5
Content-Type: application/json
--- response_body_like chomp
^\{"error":\{"message":"Model \\"smol\\" is not available: nginx runs with \\"master_process off\\", so there is no scheduler process","type":"server_error","param":null,"code":"model_unavailable"\}\}$
--- error_log
cannot be served with "master_process off": no scheduler process



=== TEST 25: srt_forward_hooks with a field of the wrong type
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_forward_hooks $TEST_NGINX_BAD_HOOKS; }
--- must_die
--- error_log eval
qr/"srt_forward_hooks": \S+bad-hooks.json: forward_hooks\[0\]\.target_modules must be a list of module name patterns, not a number/



=== TEST 26: srt_forward_hooks that is not JSON
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_forward_hooks $TEST_NGINX_BROKEN_HOOKS; }
--- must_die
--- error_log eval
qr/"srt_forward_hooks": \S+broken-hooks.json: invalid JSON/



=== TEST 27: srt_wait_ready and srt_retry_after take times
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_wait_ready soon; }
--- must_die
--- error_log
"srt_wait_ready" directive invalid value



=== TEST 28: srt_numerics takes exact|fast
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_numerics int8; }
--- must_die
--- error_log
"srt_numerics" must be "exact" or "fast", not "int8"



=== TEST 29: srt_kv_cache_dtype
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_kv_cache_dtype fp8_e5m2; }
--- must_die
--- error_log
"srt_kv_cache_dtype" must be



=== TEST 30: srt_tool_call_parser takes auto|hermes|llama3|mistral|deepseekv3|pythonic
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_tool_call_parser qwen25; }
--- must_die
--- error_log
"srt_tool_call_parser" must be "auto", "hermes", "llama3", "mistral", "deepseekv3" or "pythonic", not "qwen25"



=== TEST 31: srt_reasoning_parser takes off|qwen3|deepseek-r1
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_reasoning_parser on; }
--- must_die
--- error_log
"srt_reasoning_parser" must be "off", "qwen3" or "deepseek-r1", not "on"



=== TEST 32: srt_max_activation_bytes takes off or a size up to 1g
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_max_activation_bytes 2g; }
--- must_die
--- error_log
"srt_max_activation_bytes" must be "off" or a size from 1 to 1g, not "2g"
