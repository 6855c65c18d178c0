# Back-pressure: when every request slot is taken, new requests get 503 + Retry-After at
# once (no unbounded queue), while the admitted ones complete.
# Blocks with the same config share one nginx (and one loaded model), under this harness
# and the real Test::Nginx alike (TEST_NGINX_FORCE_RESTART_ON_TEST=0; set it to 1 to
# restart nginx for every block, the real module's default).
BEGIN { $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST} //= 0 }
use Test::Nginx::Socket 'no_plan';
use POSIX ();
use IO::Socket::INET;

BEGIN {
    $ENV{TEST_NGINX_SRT_MODULE} ||= "$ENV{PWD}/build/nginx/ngx_http_srt_module.so";
    $ENV{TEST_NGINX_SRT_MODEL} ||= ($ENV{SRT_MODEL_DIR} || "$ENV{PWD}/.cache/models")
                                   . "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

master_on();
log_level('info');

our @Children;
our $Dir = "$ENV{PWD}/t/servroot_srt";
mkdir $Dir;

sub http {
    my ($method, $uri, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => Test::Nginx::Socket::server_port())
        or return '';
    $body //= '';
    print $s "$method $uri HTTP/1.0\r\nHost: localhost\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
    local $/;
    my $r = <$s>;
    return $r // '';
}

# start n long requests in the background; each child records its status line
sub start_background {
    my ($n) = @_;
    for my $i (1 .. $n) {
        my $pid = fork();
        if ($pid == 0) {
            my $r = http('POST', '/v1/completions',
                         '{"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "ignore_eos": true}');
            open my $fh, '>', "$Dir/bg$i";
            print $fh $r;
            close $fh;
            POSIX::_exit(0);
        }
        push @Children, $pid;
    }
    for (1 .. 600) {
        return 1 if http('GET', '/v1/health') =~ /"slots_free":0/;
        select undef, undef, undef, 0.05;
    }
    return 0;
}

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value("main_config", "load_module $ENV{TEST_NGINX_SRT_MODULE};")
        unless defined $block->main_config;
    $block->set_value("config", <<'EOF2') unless defined $block->config;
location /v1 {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_device cpu;
    srt_threads 2;
    srt_context_length 512;
    srt_max_running_requests 1;
    srt_max_queued_requests 1;
    srt_max_total_tokens 2048;
    srt_wait_ready 60s;
    srt_retry_after 2s;
}
EOF2
    $block->set_value("timeout", 60) unless defined $block->timeout;
});

run_tests();

__DATA__

=== TEST 1: the model loads
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like
"finish_reason":"length"



=== TEST 2: both slots busy: the next request gets 503 at once
--- init
package main;   # the real Test::Nginx evals init in its own package
unlink glob "$main::Dir/bg*";
main::start_background(2) or die "the background requests never filled the slots";
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2}
--- timeout: 2
--- error_code: 503
--- response_headers
Retry-After: 2
Content-Type: application/json
--- response_body
{"error":{"message":"The server is overloaded: too many requests in flight; retry later","type":"server_error","param":null,"code":"overloaded"}}
--- error_log
srt: model "smol" is overloaded: no free request slot



=== TEST 3: the admitted requests complete normally
--- init
package main;   # the real Test::Nginx evals init in its own package
waitpid($_, 0) for @main::Children;
for my $i (1, 2) {
    open my $fh, '<', "$main::Dir/bg$i";
    local $/;
    my $r = <$fh> // '';
    Test::More::like($r, qr/^HTTP\/1\.\d 200 .*"completion_tokens":200,/s, "background request $i completed");
}
--- request
GET /v1/health
--- response_body_like
"running":0,"queued":0,"slots_free":2,"requests_total":\d+\}
