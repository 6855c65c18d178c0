# Activations over the API (issue 17 item 2): "return_activations" returns, per choice, the
# output of model.embed_tokens / model.layers.N / model.norm for the request's positions as
# base64 tensors, byte for byte what a forward hook on that module sees (the example capture
# library dumps it beside; t/lib/activations_check.py compares), in the finishing SSE chunk
# when streaming, bounded by srt_max_activation_bytes (413), refused where it is off (400).
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

our ($DIR);

BEGIN {
    $DIR = Test::Srt::srt_dir('activations');
    $ENV{TEST_NGINX_ACT_DIR} = $DIR;
    unlink "$DIR/dump.jsonl";
    open my $fh, '>', "$DIR/hooks.json" or die $!;
    print $fh JSON::PP->new->canonical->encode({ forward_hooks => [
        { name => 'dump', target_modules => ['model.layers.10', 'model.layers.3'],
          hook_factory => 'libsrt_hook_capture.so:srt_capture_factory',
          config => { path => "$DIR/dump.jsonl" } },
    ] });
    close $fh;
}

master_on();

srt_defaults(timeout => 300, config => srt_location('/v1', srt_max_running_requests => 8, srt_max_queued_requests => 16,
                                                   srt_chunked_prefill_size => 4,
                                                   srt_forward_hooks => '$TEST_NGINX_ACT_DIR/hooks.json',
                                                   srt_hooks_path => '$TEST_NGINX_SRT_HOOK_LIB',
                                                   srt_max_activation_bytes => '2m')
                                      . srt_location_also('/small/v1', srt_max_activation_bytes => '8k')
                                      . srt_location_also('/plain/v1'));

run_tests();

__DATA__

=== TEST 1: returned tensors equal a forward hook's view of the module, in every form
--- init
Test::Srt::client_checks('activations', 31, 'activations_check.py', '{base}/v1', 'smol', "$main::DIR/dump.jsonl",
                         '{base}/small/v1', '{base}/plain/v1');
--- request eval
"POST /v1/completions\n" . JSON::PP->new->canonical->encode({ prompt => "Hi", max_tokens => 2, temperature => 0,
    return_activations => [{ module => "model.layers.0", reduce => "last", dtype => "f32" }] })
--- response_body_like eval
qr/"activations":\[\{"module":"model.layers.0","reduce":"last","dtype":"f32","shape":\[576\],"data":"[A-Za-z0-9+\/]{3072}"\}\]/



=== TEST 2: the worked example of src/hooks/README.md: a layer's residual stream for a set of prompts into numpy
--- init
Test::Srt::client_checks('residual_example', 7, 'residual_example.py', '{base}/v1', 'smol');
--- request eval
"POST /v1/completions\n" . JSON::PP->new->canonical->encode({ prompt => "Hi", max_tokens => 2, temperature => 0 })
--- response_body_like eval
qr/"finish_reason":"length"/



=== TEST 3: srt_max_activation_bytes: a bad size fails nginx -t
--- config
location /v1 {
    srt_model $TEST_NGINX_SRT_MODEL;
    srt_max_activation_bytes 2x;
}
--- must_die
--- error_log
"srt_max_activation_bytes" must be "off" or a size from 1 to 1g, not "2x"



=== TEST 4: a second location of the model may not ask for a bigger area than the first sized
--- config
location /v1 {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_max_activation_bytes 1m;
}
location /b/v1 {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_max_activation_bytes 2m;
}
--- must_die
--- error_log
"srt_max_activation_bytes" 2097152 is more than the 1048576 of the first location serving srt_model "smol"



=== TEST 5: under srt_grammar_jump_forward a constrained request returning activations gets every position and its grammar
--- config eval
Test::Srt::srt_location('/v1', srt_max_total_tokens => undef, srt_grammar_jump_forward => 'on',
                        srt_max_activation_bytes => '2m')
--- init
package main;
Test::Srt::wait_ready();
my $js = JSON::PP->new->canonical;
my $body = $js->encode({ prompt => "A record:", max_tokens => 48, temperature => 0,
    regex => '\{"name_of_the_person_in_question": "[a-z]{1,6}", "their_favourite_colour": "[a-z]{1,6}"\}',
    return_activations => [{ module => 'model.layers.3', reduce => 'all', dtype => 'f32' }] });
my ($st, $b) = Test::Srt::http_request('POST', '/v1/completions', $body);
Test::More::is($st, 200, "constrained request with activations answered") or Test::More::diag($b);
my $r = eval { $js->decode($b) } || {};
my $a = $r->{choices}[0]{activations}[0] || {};
my ($p, $g) = ($r->{usage}{prompt_tokens} // -1, $r->{usage}{completion_tokens} // -1);
Test::More::is_deeply($a->{shape}, [$p + $g - 1, 576], "all positions: prompt $p + output $g - 1 rows");
Test::More::like($r->{choices}[0]{text} // '', qr/^\{"name_of_the_person_in_question": "[a-z]{1,6}", "their_favourite_colour": "[a-z]{1,6}"\}$/, "the text follows the regex");
--- request eval
"POST /v1/completions\n" . JSON::PP->new->canonical->encode({ prompt => "Hi", max_tokens => 2, temperature => 0 })
--- response_body_like eval
qr/"finish_reason":"length"/
