# OpenAI-style errors: status codes and {"error": {message, type, param, code}} bodies,
# checked without a scheduler (master_process off), so they cannot depend on the model.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

srt_defaults(config => <<'EOF2');
location /v1 { srt_model $TEST_NGINX_SRT_MODEL name=smol; srt_retry_after 3s; client_max_body_size 1k; }
EOF2

run_tests();

__DATA__

=== TEST 1: invalid JSON
--- request
POST /v1/chat/completions
{"model": "smol", "messages": [
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body_like chomp
^\{"error":\{"message":"Invalid JSON in the request body: [^"]+","type":"invalid_request_error","param":null,"code":400\}\}$



=== TEST 2: empty body
--- request
POST /v1/chat/completions
--- error_code: 400
--- response_body_like chomp
"message":"The request body is empty; expected a JSON object"



=== TEST 3: body is not an object
--- request
POST /v1/completions
[1, 2, 3]
--- error_code: 400
--- response_body_like chomp
"message":"The request body must be a JSON object"



=== TEST 4: temperature of the wrong type
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}
--- error_code: 400
--- response_body
{"error":{"message":"'temperature' must be a number","type":"invalid_request_error","param":"temperature","code":400}}



=== TEST 5: temperature out of range
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "temperature": 2.5}
--- error_code: 400
--- response_body_like chomp
"message":"'temperature' must be between 0 and 2, got 2.5","type":"invalid_request_error","param":"temperature"



=== TEST 6: top_p must be greater than 0
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "top_p": 0}
--- error_code: 400
--- response_body_like chomp
"param":"top_p"



=== TEST 7: top_k below -1
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "top_k": -5}
--- error_code: 400
--- response_body_like chomp
"message":"'top_k' must be between -1 and \d+, got -5"



=== TEST 8: min_p out of range
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "min_p": 1.5}
--- error_code: 400
--- response_body_like chomp
"param":"min_p"



=== TEST 9: n out of range
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "n": 0}
--- error_code: 400
--- response_body_like chomp
"message":"'n' must be between 1 and 16, got 0","type":"invalid_request_error","param":"n"



=== TEST 10: n not an integer
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "n": 1.5}
--- error_code: 400
--- response_body_like chomp
"message":"'n' must be an integer"



=== TEST 11: max_tokens must be positive
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}
--- error_code: 400
--- response_body_like chomp
"param":"max_tokens"



=== TEST 12: max_completion_tokens of the wrong type
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": "10"}
--- error_code: 400
--- response_body_like chomp
"message":"'max_completion_tokens' must be an integer"



=== TEST 13: penalties out of range
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": -3}
--- error_code: 400
--- response_body_like chomp
"param":"frequency_penalty"



=== TEST 14: presence_penalty out of range
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "presence_penalty": 2.01}
--- error_code: 400
--- response_body_like chomp
"param":"presence_penalty"



=== TEST 15: repetition_penalty must be greater than 0
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "repetition_penalty": 0}
--- error_code: 400
--- response_body_like chomp
"param":"repetition_penalty"



=== TEST 16: stop of the wrong type
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "stop": 42}
--- error_code: 400
--- response_body_like chomp
"message":"'stop' must be a string or an array of strings","type":"invalid_request_error","param":"stop"



=== TEST 17: stop array with a non-string
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "stop": ["a", 1]}
--- error_code: 400
--- response_body_like chomp
"message":"'stop\[1\]' must be a string"



=== TEST 18: stop_token_ids out of the vocabulary
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "stop_token_ids": [2, 99999999]}
--- error_code: 400
--- response_body_like chomp
"message":"'stop_token_ids\[1\]' = 99999999 is not a token id of this model \(vocabulary size \d+\)"



=== TEST 19: seed must be an integer
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "seed": "abc"}
--- error_code: 400
--- response_body_like chomp
"param":"seed"



=== TEST 20: logit_bias value out of range
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": 101}}
--- error_code: 400
--- response_body_like chomp
"message":"'logit_bias' must be between -100 and 100, got 101"



=== TEST 21: logit_bias key not a token id
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"x": 1}}
--- error_code: 400
--- response_body_like chomp
"message":"'logit_bias' key \\"x\\" is not a token id of this model"



=== TEST 22: ignore_eos must be a boolean
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "ignore_eos": 1}
--- error_code: 400
--- response_body_like chomp
"message":"'ignore_eos' must be a boolean"



=== TEST 23: min_tokens negative
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "min_tokens": -1}
--- error_code: 400
--- response_body_like chomp
"param":"min_tokens"



=== TEST 24: top_logprobs without logprobs
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3}
--- error_code: 400
--- response_body_like chomp
"message":"'top_logprobs' needs 'logprobs' set to true"



=== TEST 25: top_logprobs too large
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21}
--- error_code: 400
--- response_body_like chomp
"param":"top_logprobs"



=== TEST 26: completions logprobs above 5
--- request
POST /v1/completions
{"prompt": "hi", "logprobs": 6}
--- error_code: 400
--- response_body_like chomp
"message":"'logprobs' must be between 0 and 5, got 6"



=== TEST 27: user must be a string
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "user": 7}
--- error_code: 400
--- response_body_like chomp
"param":"user"



=== TEST 28: stream must be a boolean
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}
--- error_code: 400
--- response_body_like chomp
"message":"'stream' must be a boolean"



=== TEST 29: stream_options.include_usage must be a boolean
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": {"include_usage": "yes"}}
--- error_code: 400
--- response_body_like chomp
"param":"stream_options.include_usage"



=== TEST 30: messages missing
--- request
POST /v1/chat/completions
{"model": "smol"}
--- error_code: 400
--- response_body_like chomp
"message":"'messages' is required","type":"invalid_request_error","param":"messages"



=== TEST 31: messages empty
--- request
POST /v1/chat/completions
{"messages": []}
--- error_code: 400
--- response_body_like chomp
"message":"'messages' must be a non-empty array"



=== TEST 32: prompt missing
--- request
POST /v1/completions
{"max_tokens": 3}
--- error_code: 400
--- response_body_like chomp
"message":"'prompt' is required","type":"invalid_request_error","param":"prompt"



=== TEST 33: unknown model: 404
--- request
POST /v1/chat/completions
{"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}
--- error_code: 404
--- response_body
{"error":{"message":"The model `gpt-4` does not exist; this endpoint serves `smol`","type":"invalid_request_error","param":"model","code":"model_not_found"}}



=== TEST 34: model of the wrong type
--- request
POST /v1/chat/completions
{"model": 3, "messages": [{"role": "user", "content": "hi"}]}
--- error_code: 400
--- response_body_like chomp
"message":"'model' must be a string"



=== TEST 35: GET on chat completions: 405 with Allow
--- request
GET /v1/chat/completions
--- error_code: 405
--- response_headers
Allow: POST
Content-Type: application/json
--- response_body_like chomp
"message":"Method GET is not allowed here; use POST","type":"invalid_request_error","param":null,"code":"method_not_allowed"



=== TEST 36: POST on /v1/models: 405
--- request
POST /v1/models
{}
--- error_code: 405
--- response_headers
Allow: GET, HEAD



=== TEST 37: unknown endpoint under the model's location: 404 JSON
--- request
GET /v1/embeddings
--- error_code: 404
--- response_body_like chomp
"message":"Unknown endpoint \\"/v1/embeddings\\""



=== TEST 38: body larger than client_max_body_size: 413 JSON
--- request eval
"POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "' . ("x" x 2000) . '"}]}'
--- error_code: 413
--- response_body_like chomp
"message":"Request body is too large: 2047 bytes, the limit is 1024","type":"invalid_request_error","param":null,"code":"request_too_large"



=== TEST 39: no scheduler: 503 with Retry-After and a log line
--- request
POST /v1/completions
{"prompt": "hello", "max_tokens": 4}
--- error_code: 503
--- response_headers
Retry-After: 3
--- response_body_like chomp
"type":"server_error","param":null,"code":"model_unavailable"
--- error_log
cannot be served with "master_process off"



=== TEST 40: /health is 503 without a scheduler
--- request
GET /v1/health
--- error_code: 503
--- response_headers
Retry-After: 3



=== TEST 41: /v1/models lists the served model even while it is down
--- request
GET /v1/models
--- response_body_like chomp
^\{"object":"list","data":\[\{"id":"smol","object":"model","created":\d+,"owned_by":"ngx_srt","root":"smol"\}\]\}$



=== TEST 42: /get_model_info
--- request
GET /v1/get_model_info
--- response_body_like chomp
^\{"model_path":"smol","tokenizer_path":"smol","served_model_name":"smol","is_generation":true,"status":"(down|loading)"



=== TEST 43: chunked body over the limit: 413 JSON
--- raw_request eval
my $body = '{"prompt": "' . ("y" x 1500) . '"}';
"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
. sprintf("%x\r\n%s\r\n0\r\n\r\n", length($body), $body)
--- error_code: 413
--- response_body_like chomp
"code":"request_too_large"



=== TEST 44: arrays nested 270,000 deep (530 KB) in an unknown field: 400, the worker lives
yajl_tree_free recursed once per level and overflowed the worker's stack (SIGSEGV): the exact
reproducer of issue 16; the next request on the same nginx must still be answered.
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL name=smol; client_max_body_size 1m; }
--- request eval
my $d = 270000;
['POST /v1/chat/completions
{"model":"m","messages":[{"role":"user","content":"hi"}],"x":' . ("[" x $d) . ("]" x $d) . '}',
 'POST /v1/chat/completions
{"model":"m","messages":[{"role":"user","content":"hi"}],"x":' . ('{"a":' x 150000) . '1' . ('}' x 150000) . '}',
 'GET /v1/models']
--- error_code eval
[400, 400, 200]
--- response_body_like eval
['"message":"The request body nests arrays or objects deeper than 64 levels","type":"invalid_request_error","param":null,"code":400',
 '"message":"The request body nests arrays or objects deeper than 64 levels"',
 '"object":"list"']



=== TEST 45: tools nested past yajl_gen's limit (128): a 400 naming the nesting (was "chat template context: invalid JSON")
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL name=smol; client_max_body_size 1m; }
--- request eval
'POST /v1/chat/completions
{"messages":[{"role":"user","content":"hi"}],"tools":[' . ("[" x 200) . ("]" x 200) . ']}'
--- error_code: 400
--- response_body_like chomp
"message":"The request body nests arrays or objects deeper than 64 levels"



=== TEST 46: nesting at the limit is parsed as usual (the error is the field's own)
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL name=smol; client_max_body_size 1m; }
--- request eval
'POST /v1/chat/completions
{"messages":[{"role":"user","content":"hi"}],"temperature":' . ("[" x 63) . ("]" x 63) . '}'
--- error_code: 400
--- response_body_like chomp
"message":"'temperature' must be a number"



=== TEST 47: keep-alive survives error answers: pipelined requests after a 400, 404, 405 and 503 are answered
--- init
use IO::Socket::INET ();
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => Test::Nginx::Socket::server_port(), Timeout => 5)
    or die "connect: $!";
my $bad = '{"model": "smol", "messages": [';
my $ok = '{"prompt": "hi", "max_tokens": 1}';
print $s "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " . length($bad) . "\r\n\r\n$bad"
       . "GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n"
       . "PUT /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
       . "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " . length($ok) . "\r\n\r\n$ok"
       . "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
my $all = '';
while (sysread($s, my $buf, 65536)) { $all .= $buf }
my @codes = $all =~ m{^HTTP/1\.1 (\d+) }mg;
Test::More::is("@codes", "400 404 405 503 200", "five answers on one connection") or Test::More::diag($all);
--- request
GET /v1/models
--- response_body_like chomp
"object":"list"
