# The example configurations in conf/ are valid, and nginx's own access controls (TLS,
# auth_basic, limit_req) in front of srt_model stop requests before they reach the
# scheduler: the channel's request counter (/health "requests_total") does not move.
# Every block starts from a fresh nginx (fresh limit_req state): blocks that check the
# rate limit or the counter make the requests they count in their init.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;

BEGIN {
    my $dir = Test::Srt::srt_dir();
    # a throw-away self-signed certificate for localhost, committed for the tests only
    $ENV{TEST_NGINX_SRT_TLS_CERT} = "$FindBin::Bin/lib/tls/test.crt";
    $ENV{TEST_NGINX_SRT_TLS_KEY} = "$FindBin::Bin/lib/tls/test.key";
    $ENV{TEST_NGINX_SRT_HTPASSWD} = "$dir/htpasswd";
    open my $fh, '>', "$dir/htpasswd" or die $!;
    print $fh "alice:" . crypt("wonderland", '$6$ngxsrt$') . "\n";
    close $fh;
}
$ENV{TEST_NGINX_TLS_PORT} ||= server_port() + 1;

our %ALICE = (Authorization => 'Basic YWxpY2U6d29uZGVybGFuZA==');
our %WRONG = (Authorization => 'Basic YWxpY2U6d3Jvbmc=');

# Requests through /v1/ (rate limit: 1 + a burst of 2): [headers, expected status] each.
sub requests {
    for my $r (@_) {
        my ($st, $body) = Test::Srt::http_request('POST', '/v1/completions',
                                                  '{"prompt": "Hello", "max_tokens": 2}', $r->[0]);
        Test::More::is($st, $r->[1], "setup request: $r->[1]") or Test::More::diag($body);
    }
}

master_on();

srt_defaults(timeout => 60, http_config => <<'EOF2', config => <<'EOF3');
limit_req_zone $binary_remote_addr zone=llm:1m rate=1r/m;
limit_req_status 429;
srt_device cpu;
srt_threads 2;
srt_context_length 512;
srt_max_total_tokens 2048;

server {
    listen 127.0.0.1:$TEST_NGINX_TLS_PORT ssl;
    ssl_certificate $TEST_NGINX_SRT_TLS_CERT;
    ssl_certificate_key $TEST_NGINX_SRT_TLS_KEY;
    location /v1/ {
        auth_basic "ngx_srt";
        auth_basic_user_file $TEST_NGINX_SRT_HTPASSWD;
        srt_model $TEST_NGINX_SRT_MODEL name=smol;
    }
}
EOF2
location /v1/ {
    auth_basic "ngx_srt";
    auth_basic_user_file $TEST_NGINX_SRT_HTPASSWD;
    limit_req zone=llm burst=2 nodelay;
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_wait_ready 60s;
}
location = /health {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
}
location /tls/ {
    proxy_pass https://127.0.0.1:$TEST_NGINX_TLS_PORT/;
    proxy_ssl_verify off;
}
EOF3

run_tests();

__DATA__

=== TEST 1: the example configurations pass nginx -t
--- init
package main;   # the real Test::Nginx evals init in its own package
my $run = "$ENV{PWD}/build/run";
system("mkdir -p $run");
# conf/nginx-secure.conf's files (README there says how to make real ones)
system("cp $ENV{TEST_NGINX_SRT_TLS_CERT} $run/server.crt") unless -e "$run/server.crt";
system("cp $ENV{TEST_NGINX_SRT_TLS_KEY} $run/server.key") unless -e "$run/server.key";
system("cp $ENV{TEST_NGINX_SRT_HTPASSWD} $run/htpasswd") unless -e "$run/htpasswd";
system(qq{echo '"Bearer sk-example" example;' > $run/api-keys.map}) unless -e "$run/api-keys.map";
for my $conf (qw(nginx nginx-secure nginx-two-models nginx-front)) {
    my $bin = $ENV{TEST_NGINX_BINARY} || 'nginx';
    my $out = `$bin -t -p $ENV{PWD} -c conf/$conf.conf 2>&1`;
    Test::More::is($?, 0, "conf/$conf.conf passes nginx -t") or Test::More::diag($out);
}
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- more_headers
Authorization: Basic YWxpY2U6d29uZGVybGFuZA==
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: no credentials: 401 from auth_basic, the srt handler never runs
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2}
--- error_code: 401
--- response_headers
WWW-Authenticate: Basic realm="ngx_srt"
--- no_error_log
srt handler



=== TEST 3: a wrong password: 401, the srt handler never runs
--- request
POST /v1/chat/completions
{"messages": [{"role": "user", "content": "hi"}]}
--- more_headers
Authorization: Basic YWxpY2U6d3Jvbmc=
--- error_code: 401
--- no_error_log
srt handler



=== TEST 4: over the rate limit: 429 from limit_req even with good credentials
--- init
package main;
# three requests without credentials use up the rate and its burst (limit_req runs
# before auth_basic)
requests([{}, 401], [{}, 401], [{}, 401]);
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2}
--- more_headers
Authorization: Basic YWxpY2U6d29uZGVybGFuZA==
--- error_code: 429
--- no_error_log
srt handler



=== TEST 5: only the one authenticated request reached the scheduler
--- init
package main;
requests([\%main::ALICE, 200], [{}, 401], [\%main::WRONG, 401], [\%main::ALICE, 429]);
--- request
GET /health
--- response_body_like chomp
"requests_total":1\}$



=== TEST 6: through TLS with credentials
--- request
GET /tls/v1/models
--- more_headers
Authorization: Basic YWxpY2U6d29uZGVybGFuZA==
--- response_body_like chomp
^\{"object":"list","data":\[\{"id":"smol",



=== TEST 7: through TLS without credentials: 401
--- request
GET /tls/v1/models
--- error_code: 401
