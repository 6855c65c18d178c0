# srt_prefix_affinity: the cache-aware balancer in nginx's upstream{} block, and graceful drain.
# The directive's errors, a front and a node in one nginx, then scripts/check_cluster.py on a
# real cluster: three nodes on 127.0.0.2-4 and a front on 127.0.0.1 (ports TEST_NGINX_PORT+10
# and +11), tiny model: prefix routing and hit rate vs round robin and one node, a node killed
# with SIGKILL mid-run, a node drained with nginx -s quit, a reload of the front that reorders
# its servers, hostile requests through the front.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

master_on();
log_level('info');

our $CLUSTER_PORT = ($ENV{TEST_NGINX_PORT} || 1984) + 10;
# two stand-in peers for the reported-load block (Test::Nginx substitutes $TEST_NGINX_*)
$ENV{TEST_NGINX_PEER_A} = $CLUSTER_PORT + 20;
$ENV{TEST_NGINX_PEER_B} = $CLUSTER_PORT + 21;

# request bodies the blocks share
my $sys = '{"model":"tiny","max_tokens":2,"temperature":0,"messages":[{"role":"system","content":"You are a terse assistant for the nginx documentation team."},{"role":"user","content":"Q';
our $CHAT1 = "$sys 1\"}]}";
our $CHAT2 = "$sys 2\"}]}";
our $SALT_A = '{"model":"tiny","max_tokens":1,"temperature":0,"cache_salt":"tenant-a","prompt":"the same words for two tenants of one node"}';
(our $SALT_B = $SALT_A) =~ s/tenant-a/tenant-b/;
our $MIX = '{"prompt":"alpha beta gamma delta epsilon zeta eta theta iota kappa"}';
our @LRU = map { my $i = $_; '{"model":"tiny","max_tokens":1,"temperature":0,"prompt":"'
                 . join(' ', map { "w${i}x$_" } 1 .. 12) . '"}' } 1 .. 25;

sub cluster {
    my ($only) = @_;
    my $out = `python3 $FindBin::Bin/../scripts/check_cluster.py --model $ENV{TEST_NGINX_SRT_TINY} --port $CLUSTER_PORT --only $only 2>&1`;
    my $n = tap_lines("cluster", split /\n/, $out);
    Test::More::ok($n > 0 && $? == 0, "scripts/check_cluster.py --only $only") or Test::More::diag($out);
}

srt_defaults(timeout => 120, http_config => <<'EOF2', config => <<'EOF3');
upstream llm {
    srt_prefix_affinity model=$TEST_NGINX_SRT_TINY block=4;
    server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    keepalive 4;
}
EOF2
location /v1/ {
    srt_model $TEST_NGINX_SRT_TINY name=tiny;
    srt_device cpu;
    srt_threads 1;
    srt_context_length 512;
    srt_max_total_tokens 4096;
    srt_wait_ready 60s;
    add_header X-Srt-Load $srt_load always;
}
location /front/ {
    proxy_pass http://llm/;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    add_header X-Route $srt_prefix_affinity always;
}
EOF3

run_tests();

__DATA__

=== TEST 1: srt_prefix_affinity needs the model whose tokenizer and template the peers use
--- http_config
upstream llm { srt_prefix_affinity block=8; server 127.0.0.1:1; }
--- config
--- must_die
--- error_log
srt_prefix_affinity needs "model=PATH"



=== TEST 2: an unknown parameter
--- http_config
upstream llm { srt_prefix_affinity model=$TEST_NGINX_SRT_TINY blocks=8; server 127.0.0.1:1; }
--- config
--- must_die
--- error_log
srt_prefix_affinity: invalid parameter "blocks=8" (model=PATH, chat_template=FILE, block=N, load_threshold=N, tree=SIZE)



=== TEST 3: a model that is not there
--- http_config
upstream llm { srt_prefix_affinity model=/nonexistent/model; server 127.0.0.1:1; }
--- config
--- must_die
--- error_log
srt_prefix_affinity: cannot read "/nonexistent/model"



=== TEST 4: bounds
--- http_config
upstream llm { srt_prefix_affinity model=$TEST_NGINX_SRT_TINY block=0; server 127.0.0.1:1; }
--- config
--- must_die
--- error_log
srt_prefix_affinity: "block" must be between 1 and 4096 tokens, not "block=0"



=== TEST 5: ... and the tree is at least a few pages
--- http_config
upstream llm { srt_prefix_affinity model=$TEST_NGINX_SRT_TINY tree=1k; server 127.0.0.1:1; }
--- config
--- must_die
--- error_log eval
qr/srt_prefix_affinity: "tree" must be a size of at least \d+k, not "tree=1k"/



=== TEST 6: through the front: the first request goes by load, the same prefix then goes where it went
--- init
package main;
Test::Srt::wait_ready('/v1', 60);
my ($st, $body, $raw) = http_request('POST', '/front/v1/chat/completions', $main::CHAT1);
Test::More::like($raw, qr/\r\nX-Route: load 0\/\d+\r\n/, "the first request: no prefix anywhere, by load");
Test::More::like($body, qr/"cached_tokens":0\}/, "... and the node had nothing cached");
--- request eval
"POST /front/v1/chat/completions\n$main::CHAT2"
--- error_code: 200
--- response_headers_like
X-Route: prefix [1-9]\d*/\d+
--- response_body_like chomp
"cached_tokens":[1-9]\d*\}



=== TEST 7: a body the front cannot tokenize (not JSON) is routed by load; the node answers it
--- init
Test::Srt::wait_ready('/v1', 60);
--- request
POST /front/v1/chat/completions
{"model":
--- error_code: 400
--- response_headers_like
X-Route: load 0/0



=== TEST 8: a node reports the requests it holds in X-Srt-Load ($srt_load)
--- init
Test::Srt::wait_ready('/v1', 60);
--- request
GET /v1/health
--- error_code: 200
--- response_headers
X-Srt-Load: 0



=== TEST 9: a peer's own report of its load counts: the peer with the prefix but 100 requests is passed over
--- http_config
upstream mix {
    srt_prefix_affinity model=$TEST_NGINX_SRT_TINY block=4 load_threshold=2;
    server 127.0.0.1:$TEST_NGINX_PEER_A;
    server 127.0.0.1:$TEST_NGINX_PEER_B;
}
server {
    listen 127.0.0.1:$TEST_NGINX_PEER_A;
    location / { add_header X-Srt-Load 100; return 200 "busy\n"; }
}
server {
    listen 127.0.0.1:$TEST_NGINX_PEER_B;
    location / { return 200 "idle\n"; }
}
--- config
location /mix/ {
    proxy_pass http://mix/;
    add_header X-Route $srt_prefix_affinity always;
}
--- init
package main;
my ($st, $body, $raw) = http_request('POST', '/mix/v1/completions', $main::MIX);
Test::More::like($raw, qr/\r\nX-Route: load 0\/\d+\r\n/, "the first request goes by load (a tie)");
Test::More::is($body, "busy\n", "... to the first peer, which then says it holds 100 requests");
--- request eval
"POST /mix/v1/completions\n$main::MIX"
--- response_body
idle
--- response_headers_like
X-Route: balance 0/\d+



=== TEST 10: cluster: prefix routing, hit rate vs round robin and one node
--- config
location = /done { return 204; }
--- init
main::cluster('affinity');
--- request
GET /done
--- error_code: 204



=== TEST 11: cluster: a node killed with SIGKILL mid-run
--- config
location = /done { return 204; }
--- init
main::cluster('kill');
--- request
GET /done
--- error_code: 204



=== TEST 12: cluster: a node drained with nginx -s quit mid-run
--- config
location = /done { return 204; }
--- init
main::cluster('drain');
--- request
GET /done
--- error_code: 204



=== TEST 13: cluster: a reload that reorders the front's servers credits no prefix to the wrong one
--- config
location = /done { return 204; }
--- init
main::cluster('reload');
--- request
GET /done
--- error_code: 204




=== TEST 14: the tree is bounded by its zone: with room for a few hundred blocks, the newest prompts keep theirs and the oldest lose them (LRU)
--- http_config
upstream llm {
    srt_prefix_affinity model=$TEST_NGINX_SRT_TINY block=2 tree=32k;
    server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
    server 127.0.0.1:$TEST_NGINX_SERVER_PORT;
}
--- init
package main;
Test::Srt::wait_ready('/v1', 60);
my $ok = 1;
for my $p (@main::LRU) {
    my ($st) = http_request('POST', '/front/v1/completions', $p);
    $ok &&= $st == 200;
}
Test::More::ok($ok, scalar(@main::LRU) . " prompts of 25 blocks each through a tree with room for a few hundred");
my ($st, $body, $raw) = http_request('POST', '/front/v1/completions', $main::LRU[-1]);
Test::More::like($raw, qr/\r\nX-Route: prefix \d\d+\/\d+\r\n/, "the newest prompt still matches whole");
--- request eval
"POST /front/v1/completions\n$main::LRU[0]"
--- error_code: 200
--- response_headers_like
X-Route: \w+ \d/\d+
--- no_error_log
ngx_slab_alloc() failed



=== TEST 15: cluster: hostile requests through the front crash no front worker
--- config
location = /done { return 204; }
--- init
main::cluster('fuzz');
--- request
GET /done
--- error_code: 204



=== TEST 16: a node never serves one cache_salt's prefixes to another: the front credits none across salts either
--- init
package main;
Test::Srt::wait_ready('/v1', 60);
my ($st, $body, $raw) = http_request('POST', '/front/v1/completions', $main::SALT_A);
Test::More::like($raw, qr/\r\nX-Route: load 0\/\d+\r\n/, "tenant a: first, by load");
($st, $body, $raw) = http_request('POST', '/front/v1/completions', $main::SALT_A);
Test::More::like($raw, qr/\r\nX-Route: prefix [1-9]\d*\/\d+\r\n/, "tenant a again: its prefix");
--- request eval
"POST /front/v1/completions\n$main::SALT_B"
--- error_code: 200
--- response_headers_like
X-Route: load 0/\d+
--- response_body_like chomp
"cached_tokens":0\}
