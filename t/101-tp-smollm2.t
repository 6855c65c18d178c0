# Tensor parallelism end to end on the real model: SmolLM2-135M-Instruct (Q4_1 GGUF) has 9
# heads / 3 KV heads, so it splits over 3 ranks (not 2 or 4). Greedy continuations at
# srt_tp_size 3 equal HF transformers' (t/fixtures/golden/smollm2.json, as t/020 checks at tp=1).
# Every block starts from a fresh nginx (the real Test::Nginx's default).
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

BEGIN {
    # every rank loads the same hook file: an activation logger on a column-parallel module
    # (q_proj: each rank sees its 192 of 576 features) and on a full one (the MLP's output,
    # after the all-reduce)
    my $lib = $ENV{TEST_NGINX_SRT_HOOK_LIB};
    my $dir = Test::Srt::srt_dir('hooks_tp');
    chmod 01777, $dir;   # the scheduler and its ranks run as the worker user
    unlink "$dir/act.jsonl";
    $ENV{TEST_NGINX_TP_HOOKS} = "$dir/hooks.json";
    $ENV{TEST_NGINX_TP_ACT} = "$dir/act.jsonl";
    open my $fh, '>', "$dir/hooks.json" or die "$dir/hooks.json: $!";
    print $fh JSON::PP->new->canonical->encode({ forward_hooks => [
        { name => 'log', target_modules => ['model.layers.0.self_attn.q_proj', 'model.layers.0.mlp'],
          hook_factory => "$lib/libsrt_hook_actlog.so:srt_actlog_factory",
          config => { path => "$dir/act.jsonl" } } ] });
    close $fh;
    # returned activations: every rank dumps its model.layers.10 rows to a file of its own
    unlink glob "$dir/l10.jsonl.*";
    $ENV{TEST_NGINX_TP_DUMP_HOOKS} = "$dir/dump.json";
    $ENV{TEST_NGINX_TP_DUMP} = "$dir/l10.jsonl";
    open $fh, '>', "$dir/dump.json" or die "$dir/dump.json: $!";
    print $fh JSON::PP->new->canonical->encode({ forward_hooks => [
        { name => 'dump', target_modules => ['model.layers.10'],
          hook_factory => "$lib/libsrt_hook_capture.so:srt_capture_factory",
          config => { path => "$dir/l10.jsonl", per_rank => JSON::PP::true } } ] });
    close $fh;
}

# rank r's rows of model.layers.10 as the dump hook saw them: { request_id => [packed f32 rows by position] }
sub dump_rows {
    my ($r) = @_;
    my %rows;
    open my $fh, '<', "$ENV{TEST_NGINX_TP_DUMP}.$r" or return {};
    while (my $l = <$fh>) {
        my $j = JSON::PP::decode_json($l);
        $rows{$j->{request_id}}[$j->{position}] //= pack('f<*', @{ $j->{values} });
    }
    return \%rows;
}

# (status, body) of one request
sub http { my @r = Test::Srt::http_request(@_); return @r[0, 1] }

# the activation log: its lines, from byte $from on
sub act_lines {
    my ($from) = @_;
    open my $fh, '<', $ENV{TEST_NGINX_TP_ACT} or return ();
    seek $fh, $from // 0, 0;
    return <$fh>;
}
sub act_count { my @l = act_lines(); return scalar @l }

master_on();
log_level('info');

# three ranks on the CPU, one thread each; the group takes longer to load
our @TP3 = (srt_threads => 1, srt_tp_size => 3, srt_wait_ready => '120s');

srt_defaults(timeout => 120, config => srt_location('/v1', @TP3));

run_tests();

__DATA__

=== TEST 1: tp=3 greedy = HF (token ids)
--- request
POST /v1/completions
{"model": "smol", "prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":17,"completion_tokens":12,
--- error_log eval
[qr/tp rank 2 of 3 ready \(pid \d+\)/]



=== TEST 2: tp=3 greedy = HF (string prompt)
--- request
POST /v1/completions
{"prompt": ["Once upon a time, in a small village by the sea, there lived an old fisherman who"], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" had a daughter named Elara. She was a kind and","logprobs":null,"finish_reason":"length"



=== TEST 3: tp=3 greedy = HF (code)
--- request
POST /v1/completions
{"prompt": "def add(a, b):\n    return", "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" a \+ b\\n\\n# Example usage:\\nadd_","logprobs":null,"finish_reason":"length"



=== TEST 4: srt_tp_size 2 does not divide 3 KV heads: a clear refusal in the log, 503 for requests, no hang
--- config eval
Test::Srt::srt_location('/v1', @main::TP3, srt_tp_size => 2, srt_wait_ready => undef)
--- init
package main;   # the real Test::Nginx evals init in its own package
Test::Srt::wait_scheduler_failed("smol");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- error_code: 503
--- response_body_like chomp
"message":"Model \\"smol\\" is not available: [^"]+","type":"server_error","param":null,"code":"model_unavailable"
--- error_log eval
[qr/scheduler for model "smol" failed: [^\n]*divide/]



=== TEST 5: forward hooks at tp=3: every rank loads them and sees its shard, with its rank
--- config eval
Test::Srt::srt_location('/v1', @main::TP3, srt_forward_hooks => '$TEST_NGINX_TP_HOOKS')
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 3, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"
--- no_error_log
[alert]



=== TEST 6: ... the activation log has each rank's lines: q_proj 192 wide, the MLP 576 and equal on all ranks
--- config eval
Test::Srt::srt_location('/v1', @main::TP3, srt_forward_hooks => '$TEST_NGINX_TP_HOOKS')
--- init
package main;   # the real Test::Nginx evals init in its own package
my $from = -s $ENV{TEST_NGINX_TP_ACT} || 0;
my ($st, $b) = http('POST', '/v1/completions',
    '{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 3, "temperature": 0}');
Test::More::is($st, 200, "a completion with the hooks on") or Test::More::diag($b);
my (%seen, %mlp);
for my $l (act_lines($from)) {
    my $j = eval { JSON::PP::decode_json($l) } or do { Test::More::ok(0, "JSON line: $l"); next };
    my $m = $j->{module};
    $seen{"$m/$j->{tp_rank}"}++;
    if ($m =~ /q_proj$/) {
        Test::More::is($j->{shape}[1], 192, "rank $j->{tp_rank}: q_proj shard is 576/3 wide") if $seen{"$m/$j->{tp_rank}"} == 1;
    } else {
        Test::More::is($j->{shape}[1], 576, "rank $j->{tp_rank}: the MLP output is full width") if $seen{"$m/$j->{tp_rank}"} == 1;
        push @{ $mlp{$j->{tp_rank}} }, "$j->{mode} $j->{mean} $j->{std}";
    }
}
for my $r (0 .. 2) {
    Test::More::ok($seen{"model.layers.0.self_attn.q_proj/$r"} >= 3, "rank $r logged q_proj (prefill + decode)");
    Test::More::ok($seen{"model.layers.0.mlp/$r"} >= 3, "rank $r logged the MLP");
}
Test::More::is(join('|', @{ $mlp{1} || [] }), join('|', @{ $mlp{0} || [] }), "rank 1's MLP output = rank 0's");
Test::More::is(join('|', @{ $mlp{2} || [] }), join('|', @{ $mlp{0} || [] }), "rank 2's MLP output = rank 0's");
--- request
GET /v1/models
--- response_body_like chomp
"smol"



=== TEST 7: srt_admin at tp=3: removing the hook removes it on every rank (no rank logs any more)
--- config eval
Test::Srt::srt_location('/v1', @main::TP3, srt_forward_hooks => '$TEST_NGINX_TP_HOOKS')
    . "location /admin/hooks { srt_admin on; }\n"
--- init
package main;   # the real Test::Nginx evals init in its own package
my $req = '{"prompt": [33, 28, 216], "max_tokens": 2, "temperature": 0}';
my ($st, $b) = main::http('POST', '/v1/completions', $req);
Test::More::is($st, 200, "a completion with the hooks on") or Test::More::diag($b);
my $n0 = main::act_count();
($st, $b) = main::http('POST', '/v1/completions', $req);
my $n1 = main::act_count();
Test::More::ok($n1 - $n0 >= 6, "3 ranks x 2 modules log each step: " . ($n1 - $n0) . " lines");
($st, $b) = main::http('POST', '/admin/hooks?action=remove&name=log');
Test::More::is($st, 200, "remove by name") or Test::More::diag($b);
($st, $b) = main::http('POST', '/v1/completions', $req);
Test::More::is($st, 200, "a completion after the removal") or Test::More::diag($b);
Test::More::is(main::act_count(), $n1, "no rank logged after the removal");
($st, $b) = main::http('POST', '/admin/hooks?action=readd&name=log');
Test::More::is($st, 200, "re-add by name") or Test::More::diag($b);
($st, $b) = main::http('POST', '/v1/completions', $req);
Test::More::ok(main::act_count() - $n1 >= 6, "every rank logs again after the re-add");
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"



=== TEST 8: return_activations at tp=3: model.layers.10's output is replicated after the all-reduces; rank 0's rows come back, byte for byte
--- config eval
Test::Srt::srt_location('/v1', @main::TP3, srt_max_queued_requests => 8,
                        srt_forward_hooks => '$TEST_NGINX_TP_DUMP_HOOKS', srt_max_activation_bytes => '1m')
--- init
package main;   # the real Test::Nginx evals init in its own package
use MIME::Base64 ();
Test::Srt::wait_ready(undef, 120);
my ($st, $b) = main::http('POST', '/v1/completions', JSON::PP->new->encode({ prompt => "def add(a, b):\n    return",
    max_tokens => 4, temperature => 0, return_activations => [
        { module => 'model.layers.10', reduce => 'all', dtype => 'f32' },
        { module => 'model.layers.10', reduce => 'last', dtype => 'f32' } ] }));
Test::More::is($st, 200, "return_activations at tp=3") or Test::More::diag($b);
my $j = eval { JSON::PP::decode_json($b) } || {};
my ($all, $last) = @{ $j->{choices}[0]{activations} || [] };
my $rows = $j->{usage}{prompt_tokens} + $j->{usage}{completion_tokens} - 1;
Test::More::is_deeply($all->{shape}, [$rows, 576], "all: [prompt + completion - 1, 576]");
my @d = map { main::dump_rows($_) } 0 .. 2;
my ($rid) = grep { @{ $d[0]{$_} } == $rows } keys %{ $d[0] };
Test::More::ok(defined $rid, "rank 0's hook saw the request's $rows positions");
my $r0 = join '', @{ $d[0]{$rid} || [] };
Test::More::ok(length $r0 && $r0 eq join('', @{ $d[1]{$rid} || [] }) && $r0 eq join('', @{ $d[2]{$rid} || [] }),
               "ranks 1 and 2 saw the same bytes as rank 0 (replicated)");
Test::More::ok(MIME::Base64::decode_base64($all->{data} // '') eq $r0, "all = rank 0's rows, byte for byte");
Test::More::ok(MIME::Base64::decode_base64($last->{data} // '') eq ($d[0]{$rid}[-1] // 'x'), "last = its last row");
--- request
POST /v1/completions
{"prompt": "def add(a, b):\n    return", "max_tokens": 12, "temperature": 0, "return_activations": [{"module": "model.layers.29"}]}
--- response_body_like chomp
"text":" a \+ b\\n\\n# Example usage:\\nadd_","logprobs":null,"activations":\[\{"module":"model.layers.29","reduce":"last","dtype":"f32","shape":\[576\]
