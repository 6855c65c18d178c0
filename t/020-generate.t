# Generation through nginx, a worker, the shared-memory channel and the scheduler process,
# on the real SmolLM2-135M-Instruct (Q4_1 GGUF). Expected texts are HF transformers' greedy
# tokens from t/fixtures/golden/smollm2.json, decoded with HF tokenizers.
# Every block starts from a fresh nginx: requests wait for the model (srt_wait_ready),
# blocks that only read state wait for /health first.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

srt_defaults(timeout => 60, config => srt_location('/v1'));

run_tests();

__DATA__

=== TEST 1: completions with token ids (waits for the model to load), greedy = HF
--- request
POST /v1/completions
{"model": "smol", "prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_headers
Content-Type: application/json
--- response_body_like chomp
^\{"id":"cmpl-[0-9a-f]{16}","object":"text_completion","created":\d+,"model":"smol","choices":\[\{"index":0,"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":17,"completion_tokens":12,"total_tokens":29,"prompt_tokens_details":\{"cached_tokens":\d+\}\}\}$



=== TEST 2: completions with a string prompt, greedy = HF
--- request
POST /v1/completions
{"prompt": "def add(a, b):\n    return", "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" a \+ b\\n\\n# Example usage:\\nadd_","logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21



=== TEST 3: completions with the prompt as a one-element list
--- request
POST /v1/completions
{"prompt": ["Once upon a time, in a small village by the sea, there lived an old fisherman who"], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" had a daughter named Elara. She was a kind and","logprobs":null,"finish_reason":"length"



=== TEST 4: a stop string ends the text before it (OpenAI semantics)
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 30, "temperature": 0, "stop": ["nope", ", 9"]}
--- response_body_like chomp
"text":" 7, 8","logprobs":null,"finish_reason":"stop"



=== TEST 5: stop_token_ids: finish_reason stop, the stop token's text is not returned
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 30, "temperature": 0, "stop_token_ids": [28]}
--- response_body_like chomp
"text":" 7","logprobs":null,"finish_reason":"stop"\}\],"usage":\{"prompt_tokens":17,"completion_tokens":3,



=== TEST 6: streamed completions with a stop string split across tokens: nothing past it is sent
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 30, "temperature": 0, "stop": ", 9", "stream": true}
--- response_headers
Content-Type: text/event-stream
Cache-Control: no-cache
--- response_body_like eval
# tokens that arrive together share an event: there may be no event before the last
my $chunk = qr/data: \{"id":"cmpl-[0-9a-f]{16}","object":"text_completion","created":\d+,"model":"smol","choices":\[\{"index":0,"text":"[^"]*","logprobs":null,"finish_reason":null\}\]\}\n\n/;
qr/^(?:$chunk)*data: \{"id":"cmpl-[0-9a-f]{16}","object":"text_completion","created":\d+,"model":"smol","choices":\[\{"index":0,"text":"[^"]*","logprobs":null,"finish_reason":"stop"\}\]\}\n\ndata: \[DONE\]\n\n$/
--- response_body_unlike chomp
" 9



=== TEST 7: chat completion, non-streamed
With the exact numerics (the default) the greedy answer is 7 tokens and <|im_end|> (the 8th).
--- request
POST /v1/chat/completions
{"model": "smol", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8, "temperature": 0}
--- response_body_like chomp
^\{"id":"chatcmpl-[0-9a-f]{16}","object":"chat.completion","created":\d+,"model":"smol","choices":\[\{"index":0,"message":\{"role":"assistant","content":"The capital of France is Paris."\},"logprobs":null,"finish_reason":"stop"\}\],"usage":\{"prompt_tokens":37,"completion_tokens":8,"total_tokens":45,"prompt_tokens_details":\{"cached_tokens":\d+\}\}\}$



=== TEST 8: chat SSE framing: role delta first, content deltas, finish, usage, [DONE]
--- request
POST /v1/chat/completions
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Say hi"}]}], "max_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}
--- response_headers
Content-Type: text/event-stream
--- response_body_like eval
my $h = qr/"id":"chatcmpl-[0-9a-f]{16}","object":"chat.completion.chunk","created":\d+,"model":"smol"/;
qr/^data: \{$h,"choices":\[\{"index":0,"delta":\{"role":"assistant","content":""\},"logprobs":null,"finish_reason":null\}\]\}\n\n(?:data: \{$h,"choices":\[\{"index":0,"delta":\{"content":"[^"]*"\},"logprobs":null,"finish_reason":null\}\]\}\n\n)*data: \{$h,"choices":\[\{"index":0,"delta":\{(?:"content":"[^"]*")?\},"logprobs":null,"finish_reason":"length"\}\]\}\n\ndata: \{$h,"choices":\[\],"usage":\{"prompt_tokens":\d+,"completion_tokens":6,"total_tokens":\d+,"prompt_tokens_details":\{"cached_tokens":\d+\}\}\}\n\ndata: \[DONE\]\n\n$/



=== TEST 9: n = 2 gives two choices (greedy: identical)
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0, "n": 2}
--- response_body_like chomp
"choices":\[\{"index":0,"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"\},\{"index":1,"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":17,"completion_tokens":24,



=== TEST 10: chat logprobs with top_logprobs
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0, "logprobs": true, "top_logprobs": 2}
--- response_body_like chomp
"logprobs":\{"content":\[\{"token":"[^"]*","bytes":\[[\d,]*\],"logprob":-?[\d.e-]+,"top_logprobs":\[\{"token":"[^"]*","bytes":\[[\d,]*\],"logprob":-?[\d.e-]+\},\{"token":"[^"]*","bytes":\[[\d,]*\],"logprob":-?[\d.e-]+\}\]\},\{



=== TEST 11: completions logprobs: tokens, token_logprobs, top_logprobs, text_offset
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 3, "temperature": 0, "logprobs": 1}
--- response_body_like chomp
"text":" 7,","logprobs":\{"tokens":\[" ","7",","\],"token_logprobs":\[-?[\d.e-]+,-?[\d.e-]+,-?[\d.e-]+\],"top_logprobs":\[\{" ":-?[\d.e-]+\},\{"7":-?[\d.e-]+\},\{",":-?[\d.e-]+\}\],"text_offset":\[0,1,2\]\}



=== TEST 11b: logprobs bytes are the token's own bytes, also for part of a UTF-8 character
Token 10813 is the byte-level 'ðŁ', bytes F0 9F: the start of a 4-byte character. Forced
by logit_bias, its text is U+FFFD but its bytes must be 240, 159 (OpenAI's raw bytes).
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0, "logit_bias": {"10813": 100}, "logprobs": true, "top_logprobs": 1}
--- response_body_like chomp
"logprobs":\{"content":\[\{"token":"(?:\xef\xbf\xbd|\\ufffd)","bytes":\[240,159\],"logprob":-?[\d.e-]+,"top_logprobs":\[\{"token":"Hello","bytes":\[72,101,108,108,111\],



=== TEST 12: max_tokens beyond the context: 400 with the numbers
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 1000}
--- error_code: 400
--- response_body
{"error":{"message":"This model's maximum context length is 512 tokens. However, you requested 1017 tokens (17 in the prompt, 1000 in the completion). Please reduce the length of the prompt or completion.","type":"invalid_request_error","param":"max_tokens","code":400}}



=== TEST 13: a prompt longer than the context: 400 with the numbers
--- request eval
"POST /v1/completions\n" . '{"prompt": "' . ("hello " x 600) . '"}'
--- error_code: 400
--- response_body_like chomp
"message":"This model's maximum context length is 512 tokens. However, your prompt has 60\d tokens. Please reduce the length of the prompt.","type":"invalid_request_error","param":"prompt"



=== TEST 14: token ids outside the vocabulary
--- request
POST /v1/completions
{"prompt": [1, 2, 49152000]}
--- error_code: 400
--- response_body_like chomp
"message":"'prompt\[2\]' = 49152000 is not a token id of this model



=== TEST 15: /health when ready
--- init
Test::Srt::wait_ready();
--- request
GET /v1/health
--- response_body_like chomp
^\{"status":"ok","model":"smol","running":0,"queued":0,"slots_free":\d+,"requests_total":\d+\}$



=== TEST 16: /v1/models reports the context length
--- init
Test::Srt::wait_ready();
--- request
GET /v1/models
--- response_body_like chomp
^\{"object":"list","data":\[\{"id":"smol","object":"model","created":\d+,"owned_by":"ngx_srt","root":"smol","max_model_len":512\}\]\}$



=== TEST 17: /get_model_info
--- init
Test::Srt::wait_ready();
--- request
GET /v1/get_model_info
--- response_body_like chomp
"served_model_name":"smol","is_generation":true,"status":"ready","architecture":"LlamaForCausalLM","device":"cpu[^"]*","context_length":512,"vocab_size":49152,



=== TEST 18: unknown fields are ignored
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0, "response_format": {"type": "text"}, "x_custom": [1, {"a": null}]}
--- response_body_like chomp
"text":" 7, 8, 9, 10"
