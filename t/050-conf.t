# The example configurations in conf/ are valid, and nginx's own access controls (TLS,
# auth_basic, limit_req) in front of srt_model stop requests before they reach the
# scheduler: the channel's request counter (/health "requests_total") does not move.
# Blocks with the same config share one nginx (and one loaded model), under this harness
# and the real Test::Nginx alike (TEST_NGINX_FORCE_RESTART_ON_TEST=0; set it to 1 to
# restart nginx for every block, the real module's default).
BEGIN { $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST} //= 0 }
use Test::Nginx::Socket 'no_plan';

BEGIN {
    $ENV{TEST_NGINX_SRT_MODULE} ||= "$ENV{PWD}/build/nginx/ngx_http_srt_module.so";
    $ENV{TEST_NGINX_SRT_MODEL} ||= ($ENV{SRT_MODEL_DIR} || "$ENV{PWD}/.cache/models")
                                   . "/SmolLM2-135M-Instruct.Q4_1.gguf";
    my $dir = "$ENV{PWD}/t/servroot_srt";
    mkdir $dir;
    # a throw-away self-signed certificate for localhost, committed for the tests only
    $ENV{TEST_NGINX_SRT_TLS_CERT} = "$ENV{PWD}/t/lib/tls/test.crt";
    $ENV{TEST_NGINX_SRT_TLS_KEY} = "$ENV{PWD}/t/lib/tls/test.key";
    $ENV{TEST_NGINX_SRT_HTPASSWD} = "$dir/htpasswd";
    $ENV{TEST_NGINX_TLS_PORT} ||= 1985;
    open my $fh, '>', "$dir/htpasswd" or die $!;
    print $fh "alice:" . crypt("wonderland", '$6$ngxsrt$') . "\n";
    close $fh;
}

master_on();

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value("main_config", "load_module $ENV{TEST_NGINX_SRT_MODULE};")
        unless defined $block->main_config;
    $block->set_value("http_config", <<'EOF2') unless defined $block->http_config;
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
    $block->set_value("config", <<'EOF2') unless defined $block->config;
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
EOF2
    $block->set_value("timeout", 60) unless defined $block->timeout;
});

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
for my $conf (qw(nginx nginx-secure nginx-two-models)) {
    my $bin = $ENV{TEST_NGINX_BINARY} || 'nginx';
    my $out = `$bin -t -p $ENV{PWD} -c conf/$conf.conf 2>&1`;
    Test::More::is($?, 0, "conf/$conf.conf passes nginx -t") or Test::More::diag($out);
}
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- more_headers
Authorization: Basic YWxpY2U6d29uZGVybGFuZA==
--- response_body_like
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
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2}
--- more_headers
Authorization: Basic YWxpY2U6d29uZGVybGFuZA==
--- error_code: 429
--- no_error_log
srt handler



=== TEST 5: only the one authenticated request reached the scheduler
--- request
GET /health
--- response_body_like
"requests_total":1\}$



=== TEST 6: through TLS with credentials
--- request
GET /tls/v1/models
--- more_headers
Authorization: Basic YWxpY2U6d29uZGVybGFuZA==
--- response_body_like
^\{"object":"list","data":\[\{"id":"smol",



=== TEST 7: through TLS without credentials: 401
--- request
GET /tls/v1/models
--- error_code: 401
