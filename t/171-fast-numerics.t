# srt_numerics fast through nginx on SmolLM2-135M-Instruct (Q4_1 GGUF): 8-bit activations (on
# AVX-512 VNNI the exact kernels with one digit, elsewhere their own kernels). Fast is not exact,
# but a request's tokens must not depend on what else runs: each prompt alone at temperature 0,
# then all of them twice at once (prefilled together, decoded in one batch, at different rows of
# it), must give the same text. Its first token must be HF's greedy one where HF's margin is
# not a near tie (t/fixtures/golden/smollm2.json, as t/020 checks for exact). A missing model
# is skipped, or fails under SRT_REQUIRE_MODELS=1.
use strict;
use warnings;
use Test::More;
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();
use POSIX ();

my $port = ($ENV{TEST_NGINX_PORT} || 1984) + 8;
my $json = JSON::PP->new->utf8->canonical;

sub slurp { my ($f) = @_; open my $fh, '<', $f or die "$f: $!"; local $/; return <$fh> }

my $fix = $json->decode(slurp("$FindBin::Bin/fixtures/golden/smollm2.json"));
my $path = "$ENV{TEST_NGINX_SRT_MODEL_DIR}/$fix->{path}";
unless (-e $path) {
    if ($ENV{SRT_REQUIRE_MODELS}) { fail("model $path missing") }
    else { plan skip_all => "model $path missing" }
    done_testing();
    exit 0;
}

sub completion {
    my ($ids) = @_;
    return $json->encode({ prompt => $ids, max_tokens => 24, temperature => 0, ignore_eos => JSON::PP::true });
}

sub text_of {
    my ($st, $body) = @_;
    my $r = $st == 200 ? eval { $json->decode($body) } : undef;
    return $r ? $r->{choices}[0]{text} : undef;
}

my $dir = Test::Srt::srt_dir('fast-numerics');
my $ngx = private_nginx('fast-numerics', $port,
    "srt_model $path name=m; srt_device cpu; srt_threads 2; srt_numerics fast; srt_context_length 2048; "
    . "srt_max_total_tokens 8192; srt_max_running_requests 16; srt_wait_ready 120s;");
ok($ngx->start, 'nginx starts with srt_numerics fast');
if (!ok($ngx->wait_up, 'the model loads')) {
    diag($ngx->log);
    $ngx->stop;
    done_testing();
    exit 0;
}

my @cases = grep { @{ $_->{input_ids} } } @{ $fix->{cases} };
my @alone;
for my $c (@cases) {
    my ($st, $body) = Test::Srt::http_request('POST', '/v1/completions', completion($c->{input_ids}), {}, $port);
    my $t = text_of($st, $body);
    ok(defined $t && length $t, "alone: prompt of " . scalar(@{ $c->{input_ids} }) . " tokens, 200 with text")
        or diag("status $st: $body");
    push @alone, $t // '';
}

# HF's first greedy token, where its top-2 margin leaves 8-bit activations no doubt: asked for
# as the only stop token of a one-token answer, it ends the answer with "stop", any other
# token with "length"
my ($first_n, $first_ok) = (0, 0);
for my $c (@cases) {
    next unless $c->{top_logits}[0] - $c->{top_logits}[1] >= 1.0;
    $first_n++;
    my $req = $json->encode({ prompt => $c->{input_ids}, max_tokens => 1, temperature => 0,
                              stop_token_ids => [ $c->{greedy}[0] ] });
    my ($st, $body) = Test::Srt::http_request('POST', '/v1/completions', $req, {}, $port);
    my $r = $st == 200 ? eval { $json->decode($body) } : undef;
    if ($r && ($r->{choices}[0]{finish_reason} // '') eq 'stop') { $first_ok++ }
    else { diag("prompt " . $json->encode($c->{prompt}) . ": $st $body") }
}
ok($first_n >= 3 && $first_ok == $first_n, "the first token is HF's greedy one where its margin is >= 1 "
   . "($first_ok of $first_n)");

# every prompt twice, all at once
my @pids;
my @order = ((0 .. $#cases), (0 .. $#cases));
for my $i (0 .. $#order) {
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        my ($st, $body) = Test::Srt::http_request('POST', '/v1/completions',
                                                  completion($cases[ $order[$i] ]{input_ids}), {}, $port);
        if (open my $fh, '>', "$dir/out-$i.tmp") {
            print $fh $json->encode([ $st, $body ]);
            close $fh;
            rename "$dir/out-$i.tmp", "$dir/out-$i";
        }
        POSIX::_exit(0);
    }
    push @pids, $pid;
}
waitpid($_, 0) for @pids;
my $same = 0;
for my $i (0 .. $#order) {
    my $r = -e "$dir/out-$i" ? $json->decode(slurp("$dir/out-$i")) : [ 0, '' ];
    my $t = text_of(@$r);
    if (defined $t && $t eq $alone[ $order[$i] ]) { $same++ }
    else { diag("request $i (prompt $order[$i]): got " . JSON::PP->new->ascii->encode([ $t ])
                . " alone " . JSON::PP->new->ascii->encode([ $alone[ $order[$i] ] ])) }
    unlink "$dir/out-$i";
}
is($same, scalar @order, scalar(@order) . " requests at once: each the text its prompt gave alone");

$ngx->stop;
done_testing();
