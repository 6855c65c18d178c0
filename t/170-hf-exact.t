# The proof of "exact" as a user sees it: chats the project wrote itself (several languages,
# code, lists, multi-turn, three of 600+ tokens), sent through nginx at temperature 0 with the
# default configuration (srt_numerics exact, srt_kv_cache_dtype auto = f16 on the CPU), must
# give HF transformers' greedy tokens up to the first step where HF's own top-2 margin is below
# 0.05 (there float rounding may pick either token). Fixtures: t/fixtures/exact/<model>.json,
# written by scripts/make_chat_fixtures.py with transformers on the same weights (the chat
# template rendered by transformers, so the server's template and tokenizer are checked too:
# prompt_tokens must agree). For SmolLM2 Q4_1 and the tiny Llama / Qwen2 / Qwen3 checkpoints;
# a missing model is skipped, or fails under SRT_REQUIRE_MODELS=1.
#
# Where HF's answer has no near tie, the whole answer (to EOS or 32 tokens) must be equal.
# SRT_EXACT_MODELS="tiny-llama smollm2" runs only those; SRT_EXACT_CONF adds directives (e.g.
# "srt_kv_cache_dtype f32;" or "srt_numerics fast;" to see what the other settings give).
use strict;
use warnings;
use Test::More;
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

my $port = ($ENV{TEST_NGINX_PORT} || 1984) + 7;
my $json = JSON::PP->new->utf8;

sub slurp { my ($f) = @_; open my $fh, '<', $f or die "$f: $!"; local $/; return <$fh> }

my @models = $ENV{SRT_EXACT_MODELS} ? split(' ', $ENV{SRT_EXACT_MODELS})
    : map { m{/([^/]+)\.json$} ? $1 : () } sort glob("$FindBin::Bin/fixtures/exact/*.json");
ok(scalar @models, "fixtures: @models");
for my $name (@models) {
    my $fix = $json->decode(slurp("$FindBin::Bin/fixtures/exact/$name.json"));
    my $path = "$ENV{TEST_NGINX_SRT_MODEL_DIR}/$fix->{path}";
    unless (-e $path) {
        if ($ENV{SRT_REQUIRE_MODELS}) { fail("$name: model $path missing") }
        else { diag("$name: model $path missing, skipped") }
        next;
    }
    my $ngx = private_nginx("exact-$name", $port,
        "srt_model $path name=m; srt_device cpu; srt_threads 2; srt_context_length 2048; "
        . "srt_max_total_tokens 8192; srt_wait_ready 120s; " . ($ENV{SRT_EXACT_CONF} // ''));
    ok($ngx->start, "$name: nginx starts") or next;
    if (!ok($ngx->wait_up, "$name: the model loads")) {
        diag($ngx->log);
        $ngx->stop;
        next;
    }
    my ($n, $whole, $tokens) = (0, 0, 0);
    for my $c (@{ $fix->{cases} }) {
        $n++;
        my $req = $json->encode({ messages => $c->{messages}, max_tokens => $fix->{max_new} + 0,
                                  temperature => 0 });
        my ($st, $body) = Test::Srt::http_request('POST', '/v1/chat/completions', $req, {}, $port);
        my $r = eval { $json->decode($body) };
        if (!ok($st == 200 && $r, "$name chat $n: 200 with JSON")) {
            diag("status $st: $body");
            next;
        }
        my $content = $r->{choices}[0]{message}{content} // '';
        is($r->{usage}{prompt_tokens}, $c->{prompt_tokens},
           "$name chat $n: prompt tokens = HF's (template + tokenizer)");
        if ($c->{complete}) {
            $whole++;
            $tokens += scalar @{ $c->{tokens} };
            is($content, $c->{text}, "$name chat $n: the whole answer = HF's greedy ("
               . scalar(@{ $c->{tokens} }) . " tokens, no near tie)");
            is($r->{usage}{completion_tokens}, scalar @{ $c->{tokens} }, "$name chat $n: as many tokens as HF");
        } else {
            $tokens += $c->{exact_tokens};
            ok(index($content, $c->{exact_text}) == 0,
               "$name chat $n: HF's first $c->{exact_tokens} tokens (up to its near tie, margin "
               . $c->{margins}[ $c->{exact_tokens} ] . ")")
                or diag("got:  " . JSON::PP->new->ascii->encode([$content]) . "\nwant: "
                        . JSON::PP->new->ascii->encode([$c->{exact_text}]));
        }
    }
    diag("$name: $n chats, $whole answered whole, $tokens tokens compared");
    $ngx->stop;
    select undef, undef, undef, 0.5;
}

done_testing();
