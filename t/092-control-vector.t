# Control vectors (issue 17): srt_control_vector loads llama.cpp's control-vector GGUF and adds
# scale * direction.L to model.layers.L's output for L in the layer range, as llama.cpp's
# --control-vector-scaled / --control-vector-layer-range do. The reference is llama.cpp's
# loading and layer rules applied in Python to the same file (scripts/make_control_vector.py),
# served as per-request steering specs: the greedy text must be the same. (llama.cpp itself is
# not run here: no llama.cpp build is part of the test environment.)
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

our ($HF_TEXT, $PROMPT, $DIR);

BEGIN {
    $DIR = Test::Srt::srt_dir('cvec');
    $ENV{TEST_NGINX_CVEC_DIR} = $DIR;
    system('python3', "$FindBin::Bin/../scripts/make_control_vector.py", $DIR, 2, 3, 12) == 0
        or die "make_control_vector.py failed";
    $PROMPT = "def add(a, b):\n    return";
    $HF_TEXT = " a + b\n\n# Example usage:\nadd_";
}

sub text {
    my (%extra) = @_;
    my $body = JSON::PP->new->canonical->encode({ prompt => $PROMPT, max_tokens => 12,
                                                  temperature => 0, %extra });
    my ($st, $b) = Test::Srt::http_request('POST', '/v1/completions', $body);
    Test::More::is($st, 200, "completion status") or Test::More::diag($b);
    my $j = eval { JSON::PP::decode_json($b) } or return "(not JSON: $b)";
    return $j->{choices}[0]{text};
}

master_on();

srt_defaults(timeout => 120, config => srt_location('/v1', srt_forward_hooks => '$TEST_NGINX_CVEC_DIR/ref.json',
    srt_hooks_path => '$TEST_NGINX_SRT_HOOK_LIB',
    srt_control_vector => '$TEST_NGINX_CVEC_DIR/cv.gguf scale=2 layers=3-12 name=cvec per_request',
    srt_request_hooks => 'cvec ref'));

run_tests();

__DATA__

=== TEST 1: the control vector's greedy text is the reference's (llama.cpp's rules on the same file)
--- init
my $plain = main::text();
Test::More::is($plain, $main::HF_TEXT, "no selection: HF's greedy text");
my $ref = main::text(hooks => [{ name => 'ref' }]);
Test::More::isnt($ref, $main::HF_TEXT, "the reference steers the text");
Test::More::is(main::text(hooks => [{ name => 'cvec' }]), $ref, "srt_control_vector scale=2 layers=3-12: the reference's text");
Test::More::is(main::text(hooks => [{ name => 'cvec', config => { scale => 0 } }]), $main::HF_TEXT,
               "a request's scale 0: HF's text");
Test::More::is(main::text(hooks => [{ name => 'cvec', config => { scale => 2 } }]), $ref,
               "a request's scale 2: the reference again");
--- request eval
"POST /v1/completions\n" . JSON::PP->new->canonical->encode({ prompt => $main::PROMPT, max_tokens => 12, temperature => 0 })
--- response_body_like eval
qr/"text":" a \+ b\\n\\n# Example usage:\\nadd_"/
--- error_log
Registered control vector 'cvec'



=== TEST 2: a file llama.cpp refuses (direction.0) fails nginx -t, naming it
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_control_vector $TEST_NGINX_CVEC_DIR/bad.gguf; }
--- must_die
--- error_log
"srt_control_vector":
bad.gguf: tensor 'direction.0': layer 0 has no control vector



=== TEST 3: a bad parameter fails nginx -t
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_control_vector $TEST_NGINX_CVEC_DIR/cv.gguf layers=5-2; }
--- must_die
--- error_log
"srt_control_vector": invalid parameter "layers=5-2"
