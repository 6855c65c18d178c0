# Per-request hooks and control vectors under tensor parallelism (issue 17): every rank must
# apply the same selection and config, so the greedy text at srt_tp_size 2 equals tp=1's.
# The tiny llama (hidden 64, 3 layers, 4 heads / 2 KV heads: splits in two) with a control
# vector for it (scripts/make_control_vector.py, scale 2, layers 1-2) and the reference steering
# specs made from the same file (per request, "ref"). TEST 1 records the tp=1 texts; TEST 2
# and 3 serve the same requests at tp=2 (selected per request, then the control vector for
# every request).
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

our ($DIR, %TP1);

BEGIN {
    $DIR = Test::Srt::srt_dir('tpcv');
    $ENV{TEST_NGINX_CVEC_DIR} = $DIR;
    system('python3', "$FindBin::Bin/../scripts/make_control_vector.py", $DIR, 2, 1, 2, 64, 3) == 0
        or die "make_control_vector.py failed";
}

sub text {
    my (%extra) = @_;
    my $body = JSON::PP->new->canonical->encode({ prompt => [33, 28, 216, 34, 28, 216, 35, 28], max_tokens => 12,
                                                  temperature => 0, %extra });
    my ($st, $b) = Test::Srt::http_request('POST', '/v1/completions', $body);
    Test::More::is($st, 200, "completion status") or Test::More::diag($b);
    my $j = eval { JSON::PP::decode_json($b) } or return "(not JSON: $b)";
    return $j->{choices}[0]{text};
}

# the requests every block sends: name => extra body fields
our @CASES = (
    [ plain => () ],
    [ ref => (hooks => [{ name => 'ref' }]) ],
    [ ref4 => (hooks => [{ name => 'ref', config => { scale => 4 } }]) ],
    [ cvec => (hooks => [{ name => 'cvec' }]) ],
    [ cvec_half => (hooks => [{ name => 'cvec', config => { scale => 0.5 } }]) ],
);

sub conf {
    my ($tp, $cvec) = @_;
    return <<"EOF2";
location /v1 {
    srt_model \$TEST_NGINX_SRT_TINY name=tiny;
    srt_device cpu;
    srt_threads 1;
    srt_tp_size $tp;
    srt_context_length 512;
    srt_max_total_tokens 4096;
    srt_wait_ready 60s;
    srt_forward_hooks \$TEST_NGINX_CVEC_DIR/ref.json;
    srt_hooks_path \$TEST_NGINX_SRT_HOOK_LIB;
    srt_control_vector \$TEST_NGINX_CVEC_DIR/cv.gguf scale=2 layers=1-2 $cvec;
    srt_request_hooks ref@{[ $cvec =~ /per_request/ ? ' cvec' : '' ]};
}
EOF2
}

master_on();
no_shuffle();
log_level('info');

srt_defaults(timeout => 120, config => conf(1, 'name=cvec per_request'));

run_tests();

__DATA__

=== TEST 1: tp=1: the texts every selection gives (the steering moves the tiny model's text)
--- init
for my $c (@main::CASES) {
    my ($name, @extra) = @$c;
    $main::TP1{$name} = main::text(@extra);
}
Test::More::isnt($main::TP1{ref}, $main::TP1{plain}, "tp=1: the reference steers the text");
Test::More::isnt($main::TP1{ref4}, $main::TP1{ref}, "tp=1: a request's own scale gives another text");
Test::More::is($main::TP1{cvec}, $main::TP1{ref}, "tp=1: the control vector gives the reference's text");
--- request
GET /v1/models
--- response_body_like chomp
"id":"tiny"
--- no_error_log
tp rank



=== TEST 2: tp=2: per-request hooks and a per-request control vector give tp=1's texts
--- config eval
main::conf(2, 'name=cvec per_request')
--- init
for my $c (@main::CASES) {
    my ($name, @extra) = @$c;
    Test::More::is(main::text(@extra), $main::TP1{$name}, "tp=2: '$name' = tp=1");
}
--- request
GET /v1/models
--- response_body_like chomp
"id":"tiny"
--- error_log eval
[qr/tp rank 1 of 2 ready/, qr/Registered control vector 'cvec'/]



=== TEST 3: tp=2: a control vector for every request gives tp=1's selected text to a plain request
--- config eval
main::conf(2, 'name=cvec')
--- init
Test::More::is(main::text(), $main::TP1{cvec}, "tp=2: srt_control_vector (every request) = tp=1's selection");
Test::More::is(main::text(hooks => [{ name => 'ref', config => { scale => 0 } }]), $main::TP1{cvec},
               "tp=2: with a zero-scale selection next to it, the same");
--- request
GET /v1/models
--- response_body_like chomp
"id":"tiny"
--- error_log eval
[qr/tp rank 1 of 2 ready/]
