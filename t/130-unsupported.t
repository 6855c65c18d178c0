# Never say yes to what we do not do: request fields of OpenAI, SGLang, vLLM and llama.cpp
# that would change the output and are not implemented get a 400 naming them; their no-op
# values and the harmless fields (conf/README.md lists both sets) pass validation.
# Our own opt-in fields are refused only where their directive is off: "hooks" without
# srt_request_hooks, "return_activations" without srt_max_activation_bytes (t/093 tests them on).
# No scheduler (master_process off): what passes validation gets 503, what does not 400.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

srt_defaults(config => <<'EOF2');
location /v1 { srt_model $TEST_NGINX_SRT_MODEL name=smol; srt_retry_after 3s; }
EOF2

# TEST 11's fields and the values that switch them on
our @F = (['audio', '{"voice": "alloy", "format": "wav"}'], ['reasoning_effort', '"low"'],
         ['verbosity', '"low"'], ['web_search_options', '{}'], ['structural_tag', '{}'],
         ['lora_path', '"x"'], ['custom_logit_processor', '"x"'], ['session_params', '{}'],
         ['chat_template_kwargs', '{"enable_thinking": false}'], ['continue_final_message', 'true'],
         ['return_hidden_states', 'true'], ['no_stop_trim', 'true'], ['stop_regex', '"a+"'],
         ['skip_special_tokens', 'false'], ['spaces_between_special_tokens', 'false'],
         ['guided_json', '{}'], ['guided_regex', '"a"'], ['guided_choice', '["a"]'],
         ['guided_grammar', '"x"'], ['structured_outputs', '{}'], ['use_beam_search', 'true'],
         ['length_penalty', '1.0'], ['include_stop_str_in_output', 'true'],
         ['truncate_prompt_tokens', '5'], ['prompt_logprobs', '1'], ['allowed_token_ids', '[1]'],
         ['bad_words', '["x"]'], ['add_generation_prompt', 'false'], ['add_special_tokens', 'true'],
         ['documents', '[{"text": "x"}]'], ['chat_template', '"x"'], ['logits_processors', '["x"]'],
         ['grammar', '"root ::= \"a\""'], ['typical_p', '0.5'], ['mirostat', '2'],
         ['dry_multiplier', '0.8'], ['xtc_probability', '0.5'], ['dynatemp_range', '0.5'],
         ['n_probs', '3'], ['samplers', '["top_k"]'], ['modalities', '["text", "audio"]']);

run_tests();

__DATA__

=== TEST 1: structured output specs pass validation (503: no scheduler here)
--- request eval
[ "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "regex": "[0-9]+"}',
  "POST /v1/completions\n" . '{"prompt": "hi", "ebnf": "root ::= \\"a\\""}',
  "POST /v1/completions\n" . '{"prompt": "hi", "json_schema": "{\\"type\\": \\"object\\"}"}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}}' ]
--- error_code eval
[503, 503, 503, 503, 503]



=== TEST 2: an invalid regex: 400 with its offset
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "regex": "[0-9"}
--- error_code: 400
--- response_body
{"error":{"message":"Invalid 'regex': regex: unterminated character class at offset 4","type":"invalid_request_error","param":"regex","code":400}}



=== TEST 3: an unsupported JSON Schema keyword is named
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "patternProperties": {"a": {}}}}}}
--- error_code: 400
--- response_body_like chomp
"message":"Invalid 'response_format': json_schema: keyword 'patternProperties' is not supported","type":"invalid_request_error","param":"response_format"



=== TEST 4: response_format of an unknown type, and grammar specs that conflict
--- request eval
[ "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}}',
  "POST /v1/completions\n" . '{"prompt": "hi", "regex": "a", "ebnf": "root ::= \\"a\\""}',
  "POST /v1/completions\n" . '{"prompt": "hi", "regex": "a", "ignore_eos": true}',
  "POST /v1/completions\n" . '{"prompt": "hi", "regex": "a", "min_tokens": 2}',
  "POST /v1/completions\n" . '{"prompt": "hi", "regex": 5}',
  "POST /v1/completions\n" . '{"prompt": "hi", "ebnf": "root ::= root \\"a\\""}' ]
--- error_code eval
[400, 400, 400, 400, 400, 400]
--- response_body_like eval
[ qr/'response_format' of type \\"xml\\" is not supported/, qr/"param":"ebnf"/, qr/"param":"ignore_eos"/,
  qr/"param":"min_tokens"/, qr/'regex' must be a string/, qr/left-recursive/ ]



=== TEST 5: json_schema that is not valid JSON
--- request
POST /v1/completions
{"prompt": "hi", "json_schema": "{\"type\": "}
--- error_code: 400
--- response_body_like chomp
"message":"Invalid 'json_schema': json_schema: invalid JSON



=== TEST 6: response_format without a type
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "response_format": "json"}
--- error_code: 400
--- response_body_like chomp
"message":"'response_format' must be an object with a string 'type'"



=== TEST 7: tools with tool_choice auto (default), required and named pass validation (503: no scheduler)
--- request eval
[ "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false}' ]
--- error_code eval
[503, 503, 503]



=== TEST 8: tool_choice naming a function that is not there, required without tools, bad parameters
--- request eval
[ "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}], "tool_choice": "required"}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": 3}}], "tool_choice": "required"}',
  "POST /v1/completions\n" . '{"prompt": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]}' ]
--- error_code eval
[400, 400, 400, 400, 400]
--- response_body_like eval
[ qr/names function \\"g\\", which is not in 'tools'/, qr/"required\\" needs 'tools'/, qr/keyword 'not' is not supported/,
  qr/'tools\[0\].function.name' must be a string/, qr/'tools' are for \/v1\/chat\/completions/ ]



=== TEST 9: tool_choice of the wrong type
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}], "tool_choice": 3}
--- error_code: 400
--- response_body_like chomp
"message":"'tool_choice' must be



=== TEST 10: deprecated function_call and functions
--- request eval
[ "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "function_call": "auto"}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "functions": [{"name": "f"}]}' ]
--- error_code eval
[400, 400]
--- response_body_like eval
[ qr/"param":"function_call"/, qr/"param":"functions"/ ]



=== TEST 11: each output-changing field of other servers is named
--- request eval
[ map { "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "'
        . $_->[0] . '": ' . $_->[1] . '}' } @main::F ]
--- error_code eval
[ (400) x scalar @main::F ]
--- response_body_like eval
[ map { qr/"param":"\Q$_\E"/ } map { $_->[0] } @main::F ]



=== TEST 12: completions suffix
--- request
POST /v1/completions
{"prompt": "hi", "suffix": "end"}
--- error_code: 400
--- response_body_like chomp
"param":"suffix"



=== TEST 13: no-op values and harmless fields pass validation (503: no scheduler here)
--- request eval
[ "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"}, "tools": [], "tool_choice": "none", "parallel_tool_calls": true, "functions": [], "function_call": "none", "modalities": ["text"], "regex": null, "skip_special_tokens": true, "continue_final_message": false, "chat_template_kwargs": {}, "user": "u", "metadata": {"a": "b"}, "store": false, "service_tier": "auto", "prompt_cache_key": "k", "safety_identifier": "s", "prediction": {"type": "content", "content": "x"}, "rid": "r1", "separate_reasoning": true, "stream_reasoning": true, "hooks": [], "return_activations": [], "cache_salt": "tenant-a"}',
  "POST /v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"}',
  "POST /v1/completions\n" . '{"prompt": "hi", "suffix": ""}' ]
--- error_code eval
[503, 503, 503]



=== TEST 15: "hooks" is refused where no srt_request_hooks lets a request select hooks
--- request
POST /v1/completions
{"prompt": "hi", "hooks": [{"name": "steer", "config": {"scale": 4}}]}
--- error_code: 400
--- response_body
{"error":{"message":"'hooks' is not enabled here: the location has no srt_request_hooks","type":"invalid_request_error","param":"hooks","code":400}}



=== TEST 16: "return_activations" is refused where srt_max_activation_bytes is off
--- request
POST /v1/completions
{"prompt": "hi", "return_activations": [{"module": "model.layers.10", "reduce": "last"}]}
--- error_code: 400
--- response_body
{"error":{"message":"'return_activations' is not enabled here: the location has no srt_max_activation_bytes","type":"invalid_request_error","param":"return_activations","code":400}}



=== TEST 17: where srt_max_activation_bytes is on, "return_activations" passes validation (503: no scheduler here) and a bad spec is still a 400
The first location serving the model sizes its slots' areas, so /act comes first; /v1 (off) still refuses.
--- config
location /act/v1 { srt_model $TEST_NGINX_SRT_MODEL name=smol; srt_retry_after 3s; srt_max_activation_bytes 64k; }
location /v1 { srt_model $TEST_NGINX_SRT_MODEL name=smol; srt_retry_after 3s; }
--- request eval
[ "POST /act/v1/completions\n" . '{"prompt": "hi", "return_activations": [{"module": "model.layers.10", "reduce": "last"}]}',
  "POST /act/v1/chat/completions\n" . '{"messages": [{"role": "user", "content": "hi"}], "return_activations": [{"module": "model.norm", "reduce": "mean", "dtype": "f16"}]}',
  "POST /act/v1/completions\n" . '{"prompt": "hi", "return_activations": [{"module": "model.layers.10", "reduce": "max"}]}',
  "POST /act/v1/completions\n" . '{"prompt": "hi", "stop": ["\\n"], "return_activations": [{"module": "model.layers.10"}]}',
  "POST /v1/completions\n" . '{"prompt": "hi", "return_activations": [{"module": "model.layers.10"}]}' ]
--- error_code eval
[503, 503, 400, 400, 400]
--- response_body_like eval
[ '"code":"model_unavailable"', '"code":"model_unavailable"',
  'return_activations\\[0\\]\\.reduce must be .*"param":"return_activations"',
  '"message":"\'stop\' strings cannot be combined with \'return_activations\' \\(stop_token_ids can\\)","type":"invalid_request_error","param":"stop"',
  '"message":"\'return_activations\' is not enabled here: the location has no srt_max_activation_bytes"' ]
