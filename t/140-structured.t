# Structured output end to end (json_schema via the openai client's parse() and pydantic,
# json_object, SGLang's regex and ebnf, n > 1, streaming, logprobs of the constrained
# distribution, errors, tool calls: named and required, streamed, a tool loop) against SmolLM2 served by nginx; t/lib/structured_e2e.py does the
# checking with jsonschema and re.fullmatch.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

srt_defaults(timeout => 300, config => srt_location('/v1/', srt_model => '$TEST_NGINX_SRT_MODEL name=smollm2'));

run_tests();

__DATA__

=== TEST 1: the openai client against constrained decoding
--- init
Test::Srt::client_checks('structured', 17, 'structured_e2e.py', '{base}/v1', 'smollm2');
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



=== TEST 3: srt_grammar_jump_forward on: a schema's long fixed keys take fewer forward steps, the output still validates and streams the same
--- config
location /v1/ {
    srt_model $TEST_NGINX_SRT_MODEL name=stepwise;
    srt_device cpu; srt_threads 1; srt_context_length 512; srt_max_total_tokens 4096;
    srt_wait_ready 60s;
}
location /jf/ {
    srt_model $TEST_NGINX_SRT_MODEL name=jumping;
    srt_device cpu; srt_threads 1; srt_context_length 512; srt_max_total_tokens 4096;
    srt_wait_ready 60s;
    srt_grammar_jump_forward on;
}
location = /metrics { srt_metrics on; }
--- init
package main;
use JSON::PP ();
Test::Srt::wait_ready('/v1');
Test::Srt::wait_ready('/jf');
my $schema = JSON::PP->new->canonical->encode({ type => 'object',
    properties => { customer_identification_number => { type => 'integer', minimum => 0, maximum => 99 },
                    shipping_address_postal_code_of_the_recipient => { type => 'string', maxLength => 6 },
                    is_priority_delivery_requested_by_the_customer => { type => 'boolean' } },
    required => [ qw(customer_identification_number shipping_address_postal_code_of_the_recipient
                     is_priority_delivery_requested_by_the_customer) ] });
my %out;
for my $p ('/v1', '/jf') {
    my $req = JSON::PP->new->canonical->encode({ prompt => 'An order as JSON:', max_tokens => 200, temperature => 0,
                                                  json_schema => $schema });
    my ($st, $body) = Test::Srt::http_request('POST', "$p/completions", $req);
    Test::More::is($st, 200, "$p: 200") or Test::More::diag($body);
    my $r = JSON::PP::decode_json($body);
    my $c = $r->{choices}[0];
    Test::More::is($c->{finish_reason}, 'stop', "$p: finish stop");
    my $o = eval { JSON::PP::decode_json($c->{text}) };
    Test::More::ok($o && $o->{customer_identification_number} =~ /^\d+$/
                   && defined $o->{shipping_address_postal_code_of_the_recipient}
                   && length($o->{shipping_address_postal_code_of_the_recipient}) <= 6
                   && JSON::PP::is_bool($o->{is_priority_delivery_requested_by_the_customer}),
                   "$p: the output follows the schema") or Test::More::diag($c->{text});
    Test::More::is($r->{usage}{completion_tokens} > 0, 1, "$p: usage counts the tokens");
    $out{$p} = $c->{text};
    # streamed: the joined deltas equal the text
    my $sreq = JSON::PP->new->canonical->encode({ prompt => 'An order as JSON:', max_tokens => 200, temperature => 0,
                                                   json_schema => $schema, stream => JSON::PP::true });
    my (undef, $sse) = Test::Srt::http_request('POST', "$p/completions", $sreq);
    my $joined = '';
    for my $line (split /\n/, $sse) {
        next unless $line =~ /^data: (\{.*\})\s*$/;
        $joined .= JSON::PP::decode_json($1)->{choices}[0]{text} // '';
    }
    Test::More::is($joined, $c->{text}, "$p: streamed deltas join to the same text");
}
my $m = Test::Srt::http_get('/metrics');
my ($off) = $m =~ /srt:forward_steps_total\{model_name="stepwise"\} (\d+)/;
my ($on) = $m =~ /srt:forward_steps_total\{model_name="jumping"\} (\d+)/;
Test::More::ok(defined $on && defined $off && $on * 10 < $off * 7,
               "jump-forward: " . ($on // '?') . " forward steps vs " . ($off // '?') . " step by step");
--- request
GET /jf/models
--- response_body_like chomp
"id":"jumping"
--- no_error_log
[alert]
