# Forward hooks through nginx (issue 6, seed 000): every failure mode of a spec file at
# `nginx -t`, the non-fatal ones as warnings while the server serves, a steering hook that
# changes SmolLM2's greedy text, the srt_admin location (list, remove, re-add, delete) and
# the activation logger's JSON lines. The unhooked greedy text is HF transformers' (the
# same prompt and text as t/020-generate.t, from t/fixtures/golden/smollm2.json).
# Every block starts from a fresh nginx (the real module's default): blocks that need
# run-time state (hooks removed through srt_admin) build it with several requests.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use JSON::PP ();

our ($HF_TEXT, $PROMPT);

BEGIN {
    my $dir = Test::Srt::srt_dir('hooks');
    Test::Srt::srt_dir('hooks/act');
    # the scheduler runs as the worker user: let it write the activation log
    chmod 01777, "$dir/act";
    unlink "$dir/act/act.jsonl";
    $ENV{TEST_NGINX_HOOKS_DIR} = $dir;
    my $lib = $ENV{TEST_NGINX_SRT_HOOK_LIB};

    my $write = sub {
        my ($name, $doc) = @_;
        open my $fh, '>', "$dir/$name" or die "$dir/$name: $!";
        print $fh JSON::PP->new->canonical->encode($doc);
        close $fh;
    };
    my $spec = sub {
        my ($name, $factory) = @_;
        return { forward_hooks => [ { name => $name, target_modules => ['model.layers.0'],
                                      hook_factory => $factory, config => {} } ] };
    };
    # fatal: a malformed factory path, a library that cannot be loaded, a missing symbol
    $write->('malformed.json', $spec->('malformed', 'no-library-no-symbol'));
    $write->('nolib.json', $spec->('nolib', '/nonexistent/dir/libsrt_hook_none.so:f'));
    $write->('nosym.json', $spec->('nosym', "$lib/libsrt_hook_steer.so:srt_no_such_factory"));

    # served: one steering hook that changes the text, an activation logger, and every
    # non-fatal case of seed 000 (each a warning, none registered)
    my @vec = map { sprintf('%.3f', 3 * sin($_ * 0.7)) + 0 } 0 .. 575;  # SmolLM2: hidden 576
    $write->('served.json', { forward_hooks => [
        { name => 'steer', target_modules => ['model.layers.10'],
          hook_factory => 'libsrt_hook_steer.so:srt_steer_factory',
          config => { vector => \@vec, scale => 4 } },
        { name => 'log', target_modules => ['model.layers.0.mlp'],
          hook_factory => 'libsrt_hook_actlog.so:srt_actlog_factory',
          config => { path => "$dir/act/act.jsonl" } },
        { name => 'no_targets', hook_factory => 'libsrt_hook_steer.so:srt_steer_factory' },
        { name => 'empty_targets', target_modules => [],
          hook_factory => 'libsrt_hook_steer.so:srt_steer_factory' },
        { name => 'no_factory', target_modules => ['model.layers.1'] },
        { name => 'null_factory', target_modules => ['model.layers.2'],
          hook_factory => 'libsrt_hook_steer.so:srt_steer_factory', config => {} },
        { name => 'nothing', target_modules => ['model.decoder.*', 'no.such.module'],
          hook_factory => 'libsrt_hook_steer.so:srt_steer_factory',
          config => { vector => [1] } },
    ] });

    $PROMPT = '{"prompt": "def add(a, b):\n    return", "max_tokens": 12, "temperature": 0}';
    $HF_TEXT = " a + b\n\n# Example usage:\nadd_";
}

# The unhooked greedy text as it appears in a /v1/completions JSON body.
our $HF_TEXT_RE = do { (my $j = JSON::PP->new->encode([$HF_TEXT])) =~ s/^\[|\]$//g; qr/"text":\Q$j\E/ };

# One HTTP/1.0 exchange with the test server: (status, body).
sub http { my @r = Test::Srt::http_request(@_); return @r[0, 1] }

# The greedy completion of $PROMPT.
sub complete {
    my ($st, $b) = http('POST', '/v1/completions', $PROMPT);
    Test::More::is($st, 200, "completion status") or Test::More::diag($b);
    my $j = eval { JSON::PP::decode_json($b) } or return "(not JSON: $b)";
    return $j->{choices}[0]{text};
}

sub admin_json {
    my ($method, $uri, $want) = @_;
    my ($st, $b) = http($method, $uri);
    Test::More::is($st, $want // 200, "$method $uri status") or Test::More::diag($b);
    return eval { JSON::PP::decode_json($b) } || {};
}

master_on();
log_level('info');

srt_defaults(timeout => 60, config => srt_location('/v1', srt_forward_hooks => '$TEST_NGINX_HOOKS_DIR/served.json',
                                                  srt_hooks_path => '$TEST_NGINX_SRT_HOOK_LIB') . <<'EOF2');
location /admin/hooks { srt_admin on; }
EOF2

run_tests();

__DATA__

=== TEST 1: a malformed hook_factory fails nginx -t, naming the spec and the factory
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_forward_hooks $TEST_NGINX_HOOKS_DIR/malformed.json; }
--- must_die
--- error_log
"srt_forward_hooks": hook spec 'malformed' (forward_hooks[0] in
malformed.json): invalid hook_factory 'no-library-no-symbol'. Expected 'libx.so:factory'



=== TEST 2: a library that cannot be loaded fails nginx -t with dlerror's text
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_forward_hooks $TEST_NGINX_HOOKS_DIR/nolib.json; }
--- must_die
--- error_log
hook spec 'nolib' (forward_hooks[0] in
cannot load library '/nonexistent/dir/libsrt_hook_none.so': /nonexistent/dir/libsrt_hook_none.so: cannot open shared object file: No such file or directory



=== TEST 3: a missing symbol fails nginx -t with dlerror's text
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_forward_hooks $TEST_NGINX_HOOKS_DIR/nosym.json; }
--- must_die
--- error_log
hook spec 'nosym' (forward_hooks[0] in
libsrt_hook_steer.so' has no symbol 'srt_no_such_factory'
libsrt_hook_steer.so: undefined symbol: srt_no_such_factory



=== TEST 4: a library named without a directory is not found without srt_hooks_path
--- config
location /v1 { srt_model $TEST_NGINX_SRT_MODEL; srt_forward_hooks $TEST_NGINX_HOOKS_DIR/served.json; }
--- must_die
--- error_log
hook spec 'steer'
libsrt_hook_steer.so



=== TEST 5: the spec with srt_hooks_path passes nginx -t (warnings only)
--- config
location /v1 {
    srt_model $TEST_NGINX_SRT_MODEL;
    srt_forward_hooks $TEST_NGINX_HOOKS_DIR/served.json;
    srt_hooks_path /nonexistent:$TEST_NGINX_SRT_HOOK_LIB;
    srt_wait_ready 60s;
    srt_max_total_tokens 4096;   # the default KV budget takes seconds to allocate
}
location /admin/hooks { srt_admin on; }
--- init
main::complete();   # waits for the model (and its hooks) to load
--- request
GET /admin/hooks
--- response_body_like chomp
"hooks":\[\{"id":1,"name":"steer","type":"forward","module":"model.layers.10",



=== TEST 6: the steering hook changes the greedy text, deterministically; warnings for the rest
--- init
my $a = main::complete();
my $b = main::complete();
Test::More::isnt($a, $main::HF_TEXT, "steered text differs from the unhooked greedy text");
Test::More::is($b, $a, "steered text is deterministic");
$main::STEERED = $a;
open my $fh, '<', Test::Nginx::Socket::server_root() . '/logs/error.log' or die $!;
my $log = do { local $/; <$fh> };
for my $want ("Registered forward hook 'steer' on model.layers.10",
              "Registered forward hook 'log' on model.layers.0.mlp",
              "Hook spec 'no_targets' has no 'target_modules', skipping",
              "Hook spec 'empty_targets' has no 'target_modules', skipping",
              "Hook spec 'no_factory' has no 'hook_factory', skipping",
              "for spec 'null_factory' returned NULL, not registering any hook",
              "No modules matched hook spec 'nothing' patterns=['model.decoder.*', 'no.such.module']") {
    Test::More::ok(index($log, $want) >= 0, "error.log: $want");
}
--- request eval
"POST /v1/completions\n$main::PROMPT"
--- response_body_unlike chomp
"text":" a \+ b\\n\\n# Example usage:\\nadd_"
--- no_error_log
[emerg]
[alert]



=== TEST 7: the admin location lists the registered hooks
--- init
main::complete();   # waits for the model (and its hooks) to load
--- request
GET /admin/hooks
--- response_headers
Content-Type: application/json
--- response_body_like chomp
^\{"generation":\d+,"active":2,"modules":\d+,"hooks":\[\{"id":1,"name":"steer","type":"forward","module":"model.layers.10","global":false,"active":true,"prepend":false,"always_call":false,"with_kwargs":false,"per_request":false,"factory":"libsrt_hook_steer.so:srt_steer_factory","source":"[^"]+served.json"\},\{"id":2,"name":"log","type":"forward","module":"model.layers.0.mlp",.*"active":true.*\}\]\}$



=== TEST 8: removal restores HF's greedy text, re-adding brings the steered text back
--- init
my $steered = main::complete();
Test::More::isnt($steered, $main::HF_TEXT, "steered before removal");
my $j = main::admin_json('POST', '/admin/hooks?action=remove&name=steer');
Test::More::is($j->{action}, 'remove', "remove answered");
Test::More::is($j->{changed}, 1, "one registration removed");
Test::More::is($j->{active}, 1, "one hook left active");
Test::More::ok(!$j->{hooks}[0]{active}, "steer listed inactive");
Test::More::is(main::complete(), $main::HF_TEXT, "removed: HF's greedy text");
Test::More::is(main::complete(), $main::HF_TEXT, "removed: again (no stale prefix cache)");
$j = main::admin_json('POST', '/admin/hooks?action=readd&id=1');
Test::More::is($j->{hooks}[0]{active}, JSON::PP::true, "steer listed active again");
Test::More::is(main::complete(), $steered, "re-added: the steered text again");
--- request
GET /admin/hooks
--- response_body_like chomp
"active":2,



=== TEST 9: remove by id and re-add by name through the location
--- init
main::complete();   # waits for the model (and its hooks) to load
--- request eval
["POST /admin/hooks?action=remove&id=1",
 "POST /v1/completions\n$main::PROMPT",
 "POST /admin/hooks?action=readd&name=steer"]
--- error_code eval
[200, 200, 200]
--- response_body_like eval
[qr/^\{"action":"remove","changed":1,"generation":\d+,"active":1,/,
 $main::HF_TEXT_RE,
 qr/^\{"action":"readd","changed":1,"generation":\d+,"active":2,/]



=== TEST 10: an unknown hook id is a 404 in OpenAI's error format
--- init
main::complete();   # waits for the model (and its hooks) to load
--- request
POST /admin/hooks?action=remove&id=99
--- error_code: 404
--- response_body_like chomp
^\{"error":\{"message":"no hook with id 99","type":"invalid_request_error","param":null,"code":404\}\}$



=== TEST 11: an unknown spec name is a 404
--- init
main::complete();   # waits for the model (and its hooks) to load
--- request
POST /admin/hooks?action=readd&name=nobody
--- error_code: 404
--- response_body_like chomp
"message":"no hook spec named 'nobody'"



=== TEST 12: a bad action is a 400
--- request
POST /admin/hooks?action=explode&id=1
--- error_code: 400
--- response_body_like chomp
^\{"error":\{"message":"unknown action \\"explode\\" \(remove, readd or delete\)","type":"invalid_request_error","param":"action","code":400\}\}$



=== TEST 13: an action without a hook is a 400; a bad id is a 400
--- init
my ($st, $b) = main::http('POST', '/admin/hooks?action=remove&id=x1');
Test::More::is($st, 400, "non-numeric id");
Test::More::like($b, qr/"param":"id"/, "non-numeric id names the param");
($st, $b) = main::http('PUT', '/admin/hooks');
Test::More::is($st, 405, "PUT is not allowed");
--- request
POST /admin/hooks?action=remove
--- error_code: 400
--- response_body_like chomp
"message":"give the hook's \\"id\\" or its spec's \\"name\\""



=== TEST 14: removing a removed hook is a 409, and changes nothing
--- init
main::complete();   # waits for the model (and its hooks) to load
--- request eval
["POST /admin/hooks?action=remove&id=1",
 "POST /admin/hooks?action=remove&id=1",
 "GET /admin/hooks"]
--- error_code eval
[200, 409, 200]
--- response_body_like eval
[qr/^\{"action":"remove","changed":1,/,
 qr/"message":"hook 1 \('steer'\) is already/,
 qr/"active":1,.*"id":1,"name":"steer",[^}]*"active":false/]



=== TEST 15: the activation logger writes one JSON line per request per call
--- init
my $file = "$ENV{TEST_NGINX_HOOKS_DIR}/act/act.jsonl";
my $before = -s $file || 0;
main::complete();
open my $fh, '<', $file or die "$file: $!";
seek $fh, $before, 0;
my @lines = <$fh>;
Test::More::ok(@lines >= 12, "lines for one prefill and 11 decode steps: " . scalar @lines);
my %modes;
for my $l (@lines) {
    my $j = eval { JSON::PP::decode_json($l) };
    Test::More::ok($j, "a JSON line") or Test::More::diag($l);
    last unless $j;
    Test::More::is($j->{module}, 'model.layers.0.mlp', "module name") or last;
    for my $k (qw(mean std min max)) {
        Test::More::ok(defined $j->{$k}, "has $k") or last;
    }
    Test::More::ok(ref $j->{shape} eq 'ARRAY', "has a shape") or last;
    Test::More::ok(defined $j->{request} || defined $j->{request_id}, "has the request id") or last;
    $modes{$j->{mode}}++ if defined $j->{mode};
}
Test::More::ok($modes{prefill} || $modes{extend}, "a prefill line") or Test::More::diag(join ',', keys %modes);
Test::More::ok($modes{decode}, "decode lines");
--- request
GET /admin/hooks
--- response_body_like chomp
"active":2,



=== TEST 16: DELETE drops a hook for good: it cannot be re-added
--- init
main::complete();   # waits for the model (and its hooks) to load
--- request eval
["DELETE /admin/hooks?id=1",
 "POST /v1/completions\n$main::PROMPT",
 "POST /admin/hooks?action=readd&id=1"]
--- error_code eval
[200, 200, 404]
--- response_body_like eval
[qr/^\{"action":"delete",/,
 $main::HF_TEXT_RE,
 qr/"message":"no hook with id 1"/]



=== TEST 17: no scheduler serving: 503
--- config
location /v1 {
    srt_model $TEST_NGINX_SERVER_ROOT/conf/nginx.conf name=broken;
    srt_device cpu;
}
location /admin/hooks { srt_admin on; }
--- init
Test::Srt::wait_scheduler_failed("broken");
--- request
GET /admin/hooks
--- error_code: 503
--- response_body_like chomp
"message":"the scheduler of model \\"broken\\" is not serving"



=== TEST 18: srt_admin_key: no or a wrong bearer token is a 401, the right one passes
--- config
location /v1 {
    srt_model $TEST_NGINX_SERVER_ROOT/conf/nginx.conf name=broken;
    srt_device cpu;
}
location /admin/hooks { srt_admin on; srt_admin_key s3cret-key; }
--- init
my ($st, $b, $raw) = Test::Srt::http_request('GET', '/admin/hooks');
Test::More::is($st, 401, "no Authorization: 401");
Test::More::like($raw, qr/\r\nWWW-Authenticate: Bearer realm="srt_admin"\r\n/, "... with WWW-Authenticate");
Test::More::like($b, qr/"code":"unauthorized"/, "... in OpenAI's error format");
($st) = Test::Srt::http_request('GET', '/admin/hooks', undef, { Authorization => 'Bearer s3cret-kez' });
Test::More::is($st, 401, "a wrong key: 401");
($st) = Test::Srt::http_request('GET', '/admin/hooks', undef, { Authorization => 'Bearer s3cret-key-and-more' });
Test::More::is($st, 401, "a longer key: 401");
--- request
GET /admin/hooks
--- more_headers
Authorization: Bearer s3cret-key
--- error_code: 503
--- response_body_like chomp
"message":"the scheduler of model \\"broken\\" is not serving"



=== TEST 19: without srt_admin_key, only loopback clients: another address gets 403
--- config
location /v1 {
    srt_model $TEST_NGINX_SERVER_ROOT/conf/nginx.conf name=broken;
    srt_device cpu;
}
location /admin/hooks { srt_admin on; }
--- init
use IO::Socket::INET ();
my ($ip) = grep { /^\d+\.\d+\.\d+\.\d+$/ && !/^127\./ } split ' ', `hostname -I 2>/dev/null`;
die "this test needs a non-loopback IPv4 address (hostname -I)\n" unless $ip;
my $s = IO::Socket::INET->new(PeerAddr => $ip, PeerPort => Test::Nginx::Socket::server_port(), Timeout => 5)
    or die "connect $ip: $!";
print $s "GET /admin/hooks HTTP/1.0\r\nHost: x\r\n\r\n";
my $all = '';
while (sysread($s, my $buf, 65536)) { $all .= $buf }
Test::More::like($all, qr{^HTTP/1\.1 403 .*"code":"forbidden"}s, "a client from $ip: 403");
--- request
GET /admin/hooks
--- error_code: 503
