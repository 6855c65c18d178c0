# Control vectors against llama.cpp itself (issue 17): on the same model file and the same
# control-vector file, srt_control_vector's greedy text through nginx equals what llama.cpp's own
# llama-server --control-vector-scaled FILE:S [--control-vector-layer-range A B] generated.
#
# The model is SmolLM2-135M-Instruct Q4_1 rewritten with every tensor dequantized to F32
# (scripts/gguf_to_f32.py: the same weights), because on the quantized file llama.cpp's CPU
# path rounds its activations to 8 bits and its logits move by up to ~0.2 from f32 (BENCHMARKS.md,
# "Control vectors against llama.cpp"); on F32 weights both keep f32 activations and only
# summation order is left between them. llama.cpp's tokens, margins and the bytes they decode to
# are recorded in t/fixtures/cvec_llamacpp_f32.json by
#     scripts/compare_cvec_llamacpp.py --f32 --llama-only --fixture t/fixtures/cvec_llamacpp_f32.json
# (llama.cpp built from source by scripts/install-bench-deps.sh; not needed here). The text must
# equal those bytes whole where llama.cpp has no near tie (top-2 margin below the fixture's
# near_tie) in its 32 tokens, else up to that step. The vector file is remade here by
# scripts/make_control_vector.py with the same seed. 5 settings x 3 prompts, each a per-request
# selection of the location's srt_control_vector with the scale in its config.
use strict;
use warnings;
use Test::More;
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

my $port = ($ENV{TEST_NGINX_PORT} || 1984) + 7;
my $json = JSON::PP->new->utf8->canonical;

sub slurp { my ($f) = @_; open my $fh, '<', $f or die "$f: $!"; local $/; return <$fh> }

my $fix = $json->decode(slurp("$FindBin::Bin/fixtures/cvec_llamacpp_f32.json"));
my $q41 = "$ENV{TEST_NGINX_SRT_MODEL_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf";
my $f32 = "$ENV{TEST_NGINX_SRT_MODEL_DIR}/$fix->{model}";
unless (-e $q41) {
    if ($ENV{SRT_REQUIRE_MODELS}) { fail("model $q41 missing") }
    else { plan skip_all => "model $q41 missing" }
    done_testing();
    exit 0;
}
unless (-e $f32) {   # made once (about 20 s, 540 MB), next to the model it comes from
    system('python3', "$FindBin::Bin/../scripts/gguf_to_f32.py", $q41, "$f32.tmp") == 0
        && rename("$f32.tmp", $f32) or die "gguf_to_f32.py $q41 failed";
}
my $dir = Test::Srt::srt_dir('cvec-llamacpp-files');
system("rm -rf '$dir'; mkdir -p '$dir'");
system('python3', "$FindBin::Bin/../scripts/make_control_vector.py", $dir, 1, 1, 29) == 0
    or die "make_control_vector.py failed";
chmod 0755, $dir;

# a model has one srt_control_vector: layers 3-12 on model m under /v1/, all layers on model m2
# (the same file, a second scheduler) under /all/v1/
my $model = "srt_device cpu; srt_threads 1; srt_context_length 512; srt_max_total_tokens 2048; "
    . "srt_wait_ready 120s;";
my $ngx = private_nginx('cvec-llamacpp', $port,
    "srt_model $f32 name=m; $model srt_control_vector $dir/cv.gguf layers=3-12 name=cv3_12 per_request; "
    . "srt_request_hooks cv3_12;",
    more => "location /all/v1/ { srt_model $f32 name=m2; $model "
            . "srt_control_vector $dir/cv.gguf name=cv_all per_request; srt_request_hooks cv_all; }");
ok($ngx->start, "nginx starts") or BAIL_OUT("nginx does not start");
my $up = $ngx->wait_up('/v1') && $ngx->wait_up('/all/v1');
ok($up, "the F32 model loads (twice)") or do { diag($ngx->log); $ngx->stop; BAIL_OUT("no model") };

my ($whole, $n) = (0, 0);
for my $c (@{ $fix->{cases} }) {
    $n++;
    my ($a, $b) = @{ $c->{layers} };
    my ($hook, $path) = $a || $b ? ('cv3_12', '/v1/completions') : ('cv_all', '/all/v1/completions');
    die "fixture layers $a-$b: only 3-12 and all are configured here" if ($a || $b) && "$a-$b" ne '3-12';
    my $what = "scale $c->{scale}, layers " . ($a || $b ? "$a-$b" : 'all') . ", prompt $c->{prompt}";
    my $req = $json->encode({ prompt => $fix->{prompts}[ $c->{prompt} ], max_tokens => $fix->{tokens} + 0,
                              temperature => 0, ignore_eos => JSON::PP::true,
                              hooks => [{ name => $hook, config => { scale => $c->{scale} + 0 } }] });
    my ($st, $body) = Test::Srt::http_request('POST', $path, $req, {}, $port);
    my $r = eval { $json->decode($body) };
    if (!ok($st == 200 && $r, "$what: 200 with JSON")) {
        diag("status $st: $body");
        next;
    }
    my $got = $r->{choices}[0]{text} // '';
    utf8::encode($got);
    my $want = pack('H*', $c->{expect_hex});
    if ($c->{expect_steps} == @{ $c->{llama_tokens} }) {
        $whole++;
        # the text may end in a partial character that one side holds back: compare whole characters
        ok(index($got, $want) == 0 && length($got) - length($want) < 4,
           "$what: the text of llama.cpp's $c->{expect_steps} tokens (no near tie)")
            or diag("got:  " . unpack('H*', $got) . "\nwant: $c->{expect_hex}");
    } else {
        ok(index($got, $want) == 0,
           "$what: llama.cpp's first $c->{expect_steps} tokens (up to its near tie, margin "
           . $c->{llama_margins}[ $c->{expect_steps} ] . ")")
            or diag("got:  " . unpack('H*', $got) . "\nwant: $c->{expect_hex}");
    }
}
cmp_ok($whole, '>=', 10, "most cases have no near tie in llama.cpp's 32 tokens ($whole of $n)");
$ngx->stop;
done_testing();
