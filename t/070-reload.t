# nginx -s reload (HUP) while a request streams: the old scheduler finishes it, the new
# one takes the model over only then, and requests sent meanwhile are served, not failed.
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

our $Out = "$ENV{PWD}/t/servroot_srt/reload-stream";
our $Child;
mkdir "$ENV{PWD}/t/servroot_srt";

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value("main_config", "load_module $ENV{TEST_NGINX_SRT_MODULE};")
        unless defined $block->main_config;
    $block->set_value("config", <<'EOF2') unless defined $block->config;
location /v1/ {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_device cpu;
    srt_threads 2;
    srt_context_length 512;
    srt_max_total_tokens 2048;
    srt_wait_ready 60s;
}
EOF2
    $block->set_value("timeout", 90) unless defined $block->timeout;
});

run_tests();

__DATA__

=== TEST 1: the model loads
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1}
--- response_body_like
"finish_reason":"length"



=== TEST 2: reload while a stream is in flight; a new request is served
--- init
unlink $main::Out;
$main::Child = fork();
if ($main::Child == 0) {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $Test::Nginx::Socket::ServerPort) or POSIX::_exit(1);
    my $body = '{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}';
    print $s "POST /v1/completions HTTP/1.0\r\nHost: localhost\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
    local $/;
    my $r = <$s> // '';
    open my $fh, '>', $main::Out;
    print $fh $r;
    close $fh;
    POSIX::_exit(0);
}
select undef, undef, undef, 0.7;
open my $fh, '<', "$Test::Nginx::Socket::ServerRoot/logs/nginx.pid" or die;
my $master = <$fh>;
chomp $master;
kill 'HUP', $master or die "HUP: $!";
select undef, undef, undef, 0.3;
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"



=== TEST 3: the stream that was in flight during the reload completed
--- init
waitpid($main::Child, 0);
open my $fh, '<', $main::Out or die;
local $/;
my $r = <$fh> // '';
Test::More::like($r, qr/^HTTP\/1\.1 200 /, "streamed request: 200");
Test::More::like($r, qr/"completion_tokens":80,.*\ndata: \[DONE\]\n\n\z/s, "streamed request: all 80 tokens and [DONE]");
open my $log, '<', "$Test::Nginx::Socket::ServerRoot/logs/error.log" or die;
my $text = <$log>;
my @owners = $text =~ /srt: scheduler process (\d+) owns model "smol"/g;
Test::More::is(scalar @owners, 2, "the new scheduler took the model over after the old one");
Test::More::like($text, qr/scheduler process $owners[0] for model "smol" exited.*scheduler process $owners[1] owns model/s,
                 "... only once the old one had exited");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like
"finish_reason":"length"
