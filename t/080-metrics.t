# srt_metrics on: Prometheus text with the channel's counters for every model.
# Every block starts from a fresh nginx (the real Test::Nginx's default): a block that
# checks counters makes the request they count itself.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

srt_defaults(timeout => 60, config => srt_location('/v1/', srt_max_total_tokens => 2048) . <<'EOF2');
location = /metrics {
    srt_metrics on;
}
EOF2

run_tests();

__DATA__

=== TEST 1: a request
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: metrics count it
--- request eval
["POST /v1/completions\n" . '{"prompt": "Hello", "max_tokens": 2, "temperature": 0}',
 "GET /metrics"]
--- error_code eval
[200, 200]
--- response_headers eval
["Content-Type: application/json", "Content-Type: text/plain; version=0.0.4"]
--- response_body_like eval
[qr/"finish_reason":"length"/,
 qr/# TYPE srt:scheduler_up gauge\nsrt:scheduler_up\{model_name="smol"\} 1\n.*srt:http_requests_submitted_total\{model_name="smol"\} 1\n.*srt:request_slots_used\{model_name="smol"\} 0\n/s]



=== TEST 3: ... and the scheduler's own metrics are there (published by the scheduler process)
--- request eval
["POST /v1/completions\n" . '{"prompt": "Hello", "max_tokens": 2, "temperature": 0}',
 "GET /metrics"]
--- error_code eval
[200, 200]
--- response_body_like eval
[qr/"finish_reason":"length"/,
 qr/srt:generation_tokens_total\{model_name="smol"\} 2\n.*srt:time_to_first_token_seconds_bucket\{model_name="smol",le="[^"]+"\} \d+/s]



=== TEST 4: srt_metrics takes on|off
--- config
location = /metrics { srt_metrics yes; }
--- must_die
--- error_log
"srt_metrics" must be "on" or "off", not "yes"



=== TEST 5: the names the Gateway API Inference Extension's endpoint picker reads are there too
--- request eval
["POST /v1/completions\n" . '{"prompt": "Hello", "max_tokens": 2, "temperature": 0}',
 "GET /metrics"]
--- error_code eval
[200, 200]
--- response_body_like eval
[qr/"finish_reason":"length"/,
 qr/# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting\{model_name="smol"\} 0\n.*# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running\{model_name="smol"\} 0\n.*vllm:kv_cache_usage_perc\{model_name="smol"\} 0\n.*vllm:gpu_cache_usage_perc\{model_name="smol"\} 0\n.*vllm:prefix_cache_queries_total\{model_name="smol"\} [1-9]\d*\n.*vllm:cache_config_info\{block_size="1",num_gpu_blocks="2048"\} 1\n.*vllm:lora_requests_info\{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""\} 1[7-9]\d{8}\n/s]
