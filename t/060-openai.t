# End to end with the official openai Python client (PyPI), streamed and not streamed,
# against SmolLM2 served by nginx.
# Every block starts from a fresh nginx (the real Test::Nginx's default).
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

srt_defaults(timeout => 120, config => srt_location('/v1/', srt_model => '$TEST_NGINX_SRT_MODEL name=smollm2',
                                                    srt_max_total_tokens => 2048));

run_tests();

__DATA__

=== TEST 1: the model loads
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: the openai client: chat, streamed chat, completions, models, errors
--- init
Test::Srt::client_checks('openai', 14, 'openai_e2e.py', '{base}/v1', 'smollm2');
--- request
GET /v1/models
--- response_body_like chomp
"id":"smollm2"
