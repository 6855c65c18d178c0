# Per-request hooks and cache isolation (issue 17): a request selects hook specs marked
# "per_request" with "hooks": [{"name", "config"}], only those its location lists in
# srt_request_hooks; requests without the selection, in the same batches (continuous
# batching, chunked prefill), produce HF's greedy text exactly; the radix cache never serves
# a prefix computed under another selection, config or cache_salt. The unhooked text is HF
# transformers' (t/fixtures/golden/smollm2.json, as in t/020 and t/090).
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

our ($HF_TEXT, $PROMPT, $DIR);

BEGIN {
    $DIR = Test::Srt::srt_dir('reqhooks');
    $ENV{TEST_NGINX_REQHOOKS_DIR} = $DIR;
    my @vec = map { sprintf('%.3f', 3 * sin($_ * 0.7)) + 0 } 0 .. 575;  # SmolLM2: hidden 576
    open my $fh, '>', "$DIR/hooks.json" or die $!;
    print $fh JSON::PP->new->canonical->encode({ forward_hooks => [
        # the spec of t/090's always-on steer, per request
        { name => 'steer', per_request => JSON::PP::true, target_modules => ['model.layers.10'],
          hook_factory => 'libsrt_hook_steer.so:srt_steer_factory',
          config => { vector => \@vec, scale => 4 } },
        # every layer; a request picks one with config.layer
        { name => 'steer_any', per_request => JSON::PP::true, target_modules => ['model.layers.*'],
          hook_factory => 'libsrt_hook_steer.so:srt_steer_factory',
          config => { vector => \@vec, scale => 1 } },
        # per request too, but no location lets a request select it
        { name => 'hidden', per_request => JSON::PP::true, target_modules => ['model.layers.3'],
          hook_factory => 'libsrt_hook_steer.so:srt_steer_factory',
          config => { vector => \@vec, scale => 100 } },
    ] });
    close $fh;
    $PROMPT = "def add(a, b):\n    return";
    $HF_TEXT = " a + b\n\n# Example usage:\nadd_";
}

sub http { my @r = Test::Srt::http_request(@_); return @r[0, 1] }

sub body {
    my (%extra) = @_;
    return JSON::PP->new->canonical->encode({ prompt => $PROMPT, max_tokens => 12,
                                              temperature => 0, %extra });
}

# (text, cached_tokens) of one completion, or a failed test.
sub complete {
    my ($uri, %extra) = @_;
    my ($st, $b) = http('POST', $uri, body(%extra));
    Test::More::is($st, 200, "completion status") or Test::More::diag($b);
    my $j = eval { JSON::PP::decode_json($b) } or return ("(not JSON: $b)", -1);
    return ($j->{choices}[0]{text}, $j->{usage}{prompt_tokens_details}{cached_tokens});
}

sub text { return (complete('/v1/completions', @_))[0] }

master_on();

srt_defaults(timeout => 120, config => srt_location('/v1', srt_max_running_requests => 8, srt_chunked_prefill_size => 4,
                                                   srt_forward_hooks => '$TEST_NGINX_REQHOOKS_DIR/hooks.json',
                                                   srt_hooks_path => '$TEST_NGINX_SRT_HOOK_LIB',
                                                   srt_request_hooks => 'steer steer_any')
                                      . srt_location_also('/plain/v1'));

run_tests();

__DATA__

=== TEST 1: a selection steers its request only; the others get HF's text, through the cache
--- init
my $plain = main::text();
Test::More::is($plain, $main::HF_TEXT, "no selection: HF's greedy text");
my $steered = main::text(hooks => [{ name => 'steer' }]);
Test::More::isnt($steered, $main::HF_TEXT, "selected: the steered text differs");
Test::More::is(main::text(), $main::HF_TEXT, "no selection after a steered run: HF's text (no steered prefix served)");
Test::More::is(main::text(hooks => [{ name => 'steer' }]), $steered, "selected again: the same steered text");
Test::More::is(main::text(hooks => [{ name => 'steer', config => { scale => 0 } }]), $main::HF_TEXT,
               "the request's own config (scale 0): HF's text");
Test::More::is(main::text(hooks => [{ name => 'steer_any', config => { layer => 10, scale => 4 } }]), $steered,
               "steer_any on every layer with the request's layer 10 and scale 4: the same text as 'steer'");
Test::More::isnt(main::text(hooks => [{ name => 'steer_any', config => { layer => 10, scale => -4 } }]), $steered,
                 "another config: another text");
$main::STEERED = $steered;
--- request eval
"POST /v1/completions\n" . main::body(hooks => [{ name => 'steer', config => { scale => 0 } }])
--- response_body_like eval
qr/"text":" a \+ b\\n\\n# Example usage:\\nadd_"/



=== TEST 2: continuous batching with chunked prefill: steered and plain requests side by side
--- init
my $steered = main::text(hooks => [{ name => 'steer' }]);
my @bodies = map { $_ % 2 ? main::body(hooks => [{ name => 'steer' }]) : main::body() } 0 .. 7;
my @pids = Test::Srt::start_clients($main::DIR, 'mix', '/v1/completions', @bodies);
my @raw = Test::Srt::wait_clients($main::DIR, 'mix', @pids);
for my $i (0 .. 7) {
    my ($json) = $raw[$i] =~ /\r\n\r\n(.*)$/s;
    my $j = eval { JSON::PP::decode_json($json // '') } || {};
    Test::More::is($j->{choices}[0]{text}, $i % 2 ? $steered : $main::HF_TEXT,
                   "client $i (" . ($i % 2 ? 'steered' : 'plain') . ") in a mixed batch");
}
--- request eval
"POST /v1/completions\n" . main::body()
--- response_body_like eval
qr/"text":" a \+ b\\n\\n# Example usage:\\nadd_"/



=== TEST 3: cache_salt keeps prefixes apart; the same salt shares them
--- init
my $long = "def add(a, b):\n    return";
main::complete('/v1/completions');
my (undef, $c0) = main::complete('/v1/completions');
Test::More::cmp_ok($c0, '>', 0, "no salt, second time: a cached prefix ($c0 tokens)");
my ($t1, $c1) = main::complete('/v1/completions', cache_salt => 'tenant-a');
Test::More::is($c1, 0, "salt a, first time: nothing cached for it");
Test::More::is($t1, $main::HF_TEXT, "salt a: HF's text");
my (undef, $c2) = main::complete('/v1/completions', cache_salt => 'tenant-a');
Test::More::cmp_ok($c2, '>', 0, "salt a, second time: its own prefix ($c2 tokens)");
my (undef, $c3) = main::complete('/v1/completions', cache_salt => 'tenant-b');
Test::More::is($c3, 0, "salt b: nothing of salt a's");
my (undef, $c4) = main::complete('/v1/completions', cache_salt => 'tenant-b',
                                 hooks => [{ name => 'steer', config => { scale => 0 } }]);
Test::More::is($c4, 0, "salt b with a selection: another namespace again");
--- request eval
"POST /v1/completions\n" . main::body(cache_salt => 'tenant-a')
--- response_body_like eval
qr/"cached_tokens":[1-9]/



=== TEST 4: a hook the location does not list is a 400 naming it
--- request eval
"POST /v1/completions\n" . main::body(hooks => [{ name => 'hidden' }])
--- error_code: 400
--- response_body_like chomp
^\{"error":\{"message":"hook 'hidden' may not be selected here \(srt_request_hooks\)","type":"invalid_request_error","param":"hooks","code":400\}\}$



=== TEST 5: "hooks" where no srt_request_hooks is set is a 400
--- request eval
"POST /plain/v1/completions\n" . main::body(hooks => [{ name => 'steer' }])
--- error_code: 400
--- response_body_like chomp
"message":"'hooks' is not enabled here: the location has no srt_request_hooks","type":"invalid_request_error","param":"hooks"



=== TEST 6: malformed selections and salts are 400s naming the field
--- request eval
["POST /v1/completions\n" . main::body(hooks => { name => 'steer' }),
 "POST /v1/completions\n" . main::body(hooks => [{ name => 'steer', config => [1] }]),
 "POST /v1/completions\n" . main::body(hooks => [{ name => 'steer', layer => 3 }]),
 "POST /v1/completions\n" . main::body(hooks => [{ name => 'steer' }, { name => 'steer' }]),
 "POST /v1/completions\n" . main::body(hooks => [map { { name => 'steer' } } 1 .. 5]),
 "POST /v1/completions\n" . main::body(hooks => [{ name => 'steer', config => { vector => [(1.5) x 3000] } }]),
 "POST /v1/completions\n" . main::body(cache_salt => 5),
 "POST /v1/completions\n" . main::body(cache_salt => '')]
--- error_code eval
[400, 400, 400, 400, 400, 400, 400, 400]
--- response_body_like eval
[qr/"message":"'hooks' must be an array.*"param":"hooks"/,
 qr/"message":"hooks\[0\].config must be an object".*"param":"hooks"/,
 qr/"message":"hooks\[0\] has an unknown field 'layer' \(name, config\)"/,
 qr/"message":"hook 'steer' is selected twice"/,
 qr/"message":"'hooks' selects 5 hooks; at most 4"/,
 qr/"message":"the hooks' configs take more than 8191 bytes of JSON"/,
 qr/"message":"'cache_salt' must be a non-empty string".*"param":"cache_salt"/,
 qr/"message":"'cache_salt' must be a non-empty string"/]



=== TEST 7: an empty or null selection is no selection
--- request eval
["POST /plain/v1/completions\n" . main::body(hooks => []),
 "POST /plain/v1/completions\n" . main::body(hooks => undef)]
--- error_code eval
[200, 200]
--- response_body_like eval
[qr/"text":" a \+ b\\n\\n# Example usage:\\nadd_"/, qr/"text":" a \+ b\\n\\n# Example usage:\\nadd_"/]



=== TEST 8: the worked example of src/hooks/README.md: per-request steering from the openai client
--- init
Test::Srt::client_checks('steer_example', 6, 'steer_example.py', '{base}/v1', 'smol');
--- request eval
"POST /v1/completions\n" . main::body()
--- response_body_like eval
qr/"text":" a \+ b\\n\\n# Example usage:\\nadd_"/



=== TEST 9: srt_request_hooks naming something that is not a per-request hook fails nginx -t
--- config
location /v1 {
    srt_model $TEST_NGINX_SRT_MODEL;
    srt_forward_hooks $TEST_NGINX_REQHOOKS_DIR/hooks.json;
    srt_hooks_path $TEST_NGINX_SRT_HOOK_LIB;
    srt_request_hooks steer nosuch;
}
--- must_die
--- error_log
"srt_request_hooks": "nosuch" is not a per-request hook of this model
