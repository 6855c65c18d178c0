# srt_server_timing: where a request's time went, as Server-Timing entries (parse, hand-off
# to the scheduler, the scheduler's own time, hand-off back); srt_scheduler_spin: the
# scheduler's bounded busy-wait before it sleeps. Every block starts from a fresh nginx.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

srt_defaults(timeout => 60, config => srt_location('/v1/', srt_max_total_tokens => undef, srt_server_timing => 'on'));

run_tests();

__DATA__

=== TEST 1: srt_server_timing on: four entries in ms, in the order of the request's path
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_headers_like
Server-Timing: ^srt-parse;dur=\d+\.\d{3}, srt-handoff;dur=\d+\.\d{3}, srt-model;dur=(?!0\.000)\d+\.\d{3}, srt-notify;dur=\d+\.\d{3}$
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: chat too (template and tokenizer time are in srt-parse)
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}
--- response_headers_like
Server-Timing: ^srt-parse;dur=(?!0\.000)\d+\.\d{3}, srt-handoff;dur=\d+\.\d{3}, srt-model;dur=\d+\.\d{3}, srt-notify;dur=\d+\.\d{3}$



=== TEST 3: off by default: no timing is disclosed
--- config eval
Test::Srt::srt_location('/v1/', srt_max_total_tokens => undef)
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1, "temperature": 0}
--- response_headers
! Server-Timing
--- error_code: 200



=== TEST 4: errors carry no timing
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": -1}
--- response_headers
! Server-Timing
--- error_code: 400



=== TEST 5: srt_scheduler_spin: requests in a row are served while the scheduler spins, and greedy output is unchanged
--- config eval
Test::Srt::srt_location('/v1/', srt_max_total_tokens => undef, srt_scheduler_spin => '2ms', srt_server_timing => 'on')
--- request eval
["POST /v1/completions\n" . '{"prompt": [1, 9690, 28], "max_tokens": 4, "temperature": 0}',
 "POST /v1/completions\n" . '{"prompt": [1, 9690, 28], "max_tokens": 4, "temperature": 0}',
 "POST /v1/completions\n" . '{"prompt": [1, 9690, 28], "max_tokens": 4, "temperature": 0}']
--- error_code eval
[200, 200, 200]
--- response_body_like eval
[qr/"completion_tokens":4/, qr/"completion_tokens":4/, qr/"completion_tokens":4/]



=== TEST 6: srt_scheduler_spin needs a unit
--- config
location /v1/ { srt_model $TEST_NGINX_SRT_MODEL; srt_scheduler_spin 200; }
--- must_die
--- error_log
"srt_scheduler_spin" must be "off" or a time up to 100ms with a unit ("200us", "1ms"), not "200"



=== TEST 7: srt_scheduler_spin is bounded
--- config
location /v1/ { srt_model $TEST_NGINX_SRT_MODEL; srt_scheduler_spin 1s; }
--- must_die
--- error_log
"srt_scheduler_spin" must be "off" or a time up to 100ms with a unit ("200us", "1ms"), not "1s"



=== TEST 8: srt_scheduler_spin 101ms is over the bound
--- config
location /v1/ { srt_model $TEST_NGINX_SRT_MODEL; srt_scheduler_spin 101ms; }
--- must_die
--- error_log
"srt_scheduler_spin" must be "off" or a time up to 100ms with a unit ("200us", "1ms"), not "101ms"



=== TEST 9: srt_server_timing takes on|off
--- config
location /v1/ { srt_model $TEST_NGINX_SRT_MODEL; srt_server_timing yes; }
--- must_die
--- error_log
invalid value "yes" in "srt_server_timing" directive, it must be "on" or "off"
