# Structured output end to end (json_schema via the openai client's parse() and pydantic,
# json_object, SGLang's regex and ebnf, n > 1, streaming, logprobs of the constrained
# distribution, errors, tool calls: named and required, streamed, a tool loop) against SmolLM2 served by nginx; t/lib/structured_e2e.py does the
# checking with jsonschema and re.fullmatch.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

srt_defaults(timeout => 300, config => <<'EOF2');
location /v1/ {
    srt_model $TEST_NGINX_SRT_MODEL name=smollm2;
    srt_device cpu;
    srt_threads 2;
    srt_context_length 512;
    srt_max_total_tokens 4096;
    srt_wait_ready 60s;
}
EOF2

run_tests();

__DATA__

=== TEST 1: the openai client against constrained decoding
--- init
package main;   # the real Test::Nginx evals init in its own package
Test::Srt::wait_ready();
my $port = server_port();
my @lines = `python3 $FindBin::Bin/lib/structured_e2e.py http://127.0.0.1:$port/v1 smollm2 2>&1`;
Test::More::is($?, 0, "structured_e2e.py ran") or Test::More::diag(join '', @lines);
my $n = tap_lines('structured', @lines);
Test::More::ok($n == 17, "structured: all checks reported ($n)");
--- request
POST /v1/completions
{"prompt": "The answer is", "max_tokens": 8, "temperature": 0, "regex": "[0-9]{3}"}
--- response_body_like chomp
"text":"[0-9]{3}","logprobs":null,"finish_reason":"stop"
--- no_error_log
[alert]



=== TEST 2: ebnf and SGLang's json_schema on completions
--- init
package main;
Test::Srt::wait_ready();
--- request eval
[ "POST /v1/completions\n" . '{"prompt": "x", "max_tokens": 4, "temperature": 0, "ebnf": "root ::= \"ab\""}',
  "POST /v1/completions\n" . '{"prompt": "x", "max_tokens": 4, "temperature": 0, "json_schema": "{\"type\": \"boolean\"}"}' ]
--- response_body_like eval
[ qr/"text":"ab",.*"finish_reason":"stop"/, qr/"text":"(true|false)",.*"finish_reason":"stop"/ ]
--- no_error_log
[alert]
