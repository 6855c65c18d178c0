# srt_device: `cuda` without a usable GPU fails at startup with the CUDA probe's reason (503 for
# requests, the reason in the log); `auto` then serves on the CPU and logs why. The probe is made
# to fail on every machine by pointing SRT_CUDA_PLUGIN (passed to the scheduler process with
# nginx's `env` directive) at a plugin that does not exist.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

BEGIN { $ENV{SRT_CUDA_PLUGIN} = Test::Srt::srt_dir() . "/no-such-dir/libsrt_cuda.so" }

master_on();
log_level('info');

# nginx clears its processes' environment but for the variables named by `env`
srt_defaults(timeout => 60, main_config => 'env SRT_CUDA_PLUGIN;');

run_tests();

__DATA__

=== TEST 1: srt_device cuda without a usable GPU: refused at startup with the probe's reason, 503
--- config eval
Test::Srt::srt_location('/v1', srt_device => 'cuda', srt_threads => 1, srt_wait_ready => undef)
--- init
Test::Srt::wait_scheduler_failed("smol");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- error_code: 503
--- response_body_like chomp
"message":"Model \\"smol\\" is not available: srt_device cuda: cannot load the CUDA backend plugin: [^"]+","type":"server_error","param":null,"code":"model_unavailable"
--- error_log eval
[qr/scheduler for model "smol" failed: srt_device cuda: cannot load the CUDA backend plugin: [^\n]*no-such-dir/]
--- no_error_log
scheduler ready



=== TEST 2: srt_device auto without a usable GPU: serves on the CPU and logs why
--- config eval
Test::Srt::srt_location('/v1', srt_device => undef, srt_threads => 1)
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"
--- error_log eval
[qr/srt_device auto: running on the CPU \(cannot load the CUDA backend plugin: [^\n]*no-such-dir/, qr/scheduler ready: [^\n]*, on cpu\n/]



=== TEST 3: srt_device cpu never probes the GPU
--- config eval
Test::Srt::srt_location('/v1', srt_threads => 1)
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"
--- no_error_log
srt_device auto
cannot load the CUDA backend plugin



=== TEST 4: srt_device cuda with srt_tp_size 2 without a usable GPU: the rank group starts, then the probe's reason fails the model
--- config eval
Test::Srt::srt_location('/v1', srt_model => '$TEST_NGINX_SRT_TINY name=tiny', srt_device => 'cuda', srt_tp_size => 2,
                        srt_threads => 1, srt_context_length => 256, srt_max_total_tokens => 2048,
                        srt_wait_ready => undef)
--- init
Test::Srt::wait_scheduler_failed("tiny");
--- request
POST /v1/completions
{"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0}
--- error_code: 503
--- response_body_like chomp
"message":"Model \\"tiny\\" is not available: srt_device cuda: cannot load the CUDA backend plugin: [^"]+","type":"server_error"
--- error_log eval
[qr/scheduler for model "tiny" failed: srt_device cuda: cannot load the CUDA backend plugin: [^\n]*no-such-dir/]
--- no_error_log
scheduler ready



=== TEST 5: srt_cuda_graph off is accepted (CPU: nothing to turn off), and serves
--- config eval
Test::Srt::srt_location('/v1', srt_threads => 1, srt_cuda_graph => 'off')
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"



=== TEST 6: srt_cuda_graph takes on|off
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_cuda_graph sometimes; }
--- must_die
--- error_log
invalid value "sometimes" in "srt_cuda_graph" directive, it must be "on" or "off"
