# nginx -s reload (HUP) while a request streams: the old scheduler finishes it, the new
# one takes the model over only then, and requests sent meanwhile are served, not failed.
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
package main;   # the real Test::Nginx evals init in its own package
unlink $main::Out;
$main::Child = fork();
if ($main::Child == 0) {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => Test::Nginx::Socket::server_port()) or POSIX::_exit(1);
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
open my $fh, '<', "${\ Test::Nginx::Socket::server_root()}/logs/nginx.pid" or die;
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
package main;   # the real Test::Nginx evals init in its own package
waitpid($main::Child, 0);
open my $fh, '<', $main::Out or die;
local $/;
my $r = <$fh> // '';
Test::More::like($r, qr/^HTTP\/1\.1 200 /, "streamed request: 200");
Test::More::like($r, qr/"completion_tokens":80,.*\ndata: \[DONE\]\n\n\z/s, "streamed request: all 80 tokens and [DONE]");
open my $log, '<', "${\ Test::Nginx::Socket::server_root()}/logs/error.log" or die;
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



=== TEST 4: nginx -s quit and -s stop: the scheduler processes exit with nginx
--- init
package main;   # the real Test::Nginx evals init in its own package
use Time::HiRes ();
my $bin = ($ENV{TEST_NGINX_BINARY} || "nginx");
for my $signal (qw(quit stop)) {
    my $prefix = "$ENV{PWD}/t/servroot_srt/stop-$signal";
    system("rm -rf $prefix; mkdir -p $prefix/conf $prefix/logs");
    open my $fh, '>', "$prefix/conf/nginx.conf" or die;
    print $fh <<"CONF";
load_module $ENV{TEST_NGINX_SRT_MODULE};
master_process on;
daemon on;
worker_processes 1;
pid $prefix/logs/nginx.pid;
error_log $prefix/logs/error.log info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $prefix/client_body_temp;
    proxy_temp_path $prefix/proxy_temp;
    fastcgi_temp_path $prefix/fastcgi_temp;
    uwsgi_temp_path $prefix/uwsgi_temp;
    scgi_temp_path $prefix/scgi_temp;
    server {
        listen 127.0.0.1:1986;
        location /v1/ { srt_model $ENV{TEST_NGINX_SRT_MODEL} name=s; srt_max_total_tokens 1024; }
    }
}
CONF
    close $fh;
    system($bin, '-p', "$prefix/", '-c', 'conf/nginx.conf') == 0 or die "nginx failed to start";
    my ($pid, $log);
    for (1 .. 400) {
        open my $lf, '<', "$prefix/logs/error.log"; local $/; $log = <$lf> // '';
        if ($log =~ /scheduler ready/ && $log =~ /scheduler process (\d+) owns model/) {
            $pid = $1;
            last;
        }
        Time::HiRes::sleep(0.05);
    }
    if (!Test::More::ok($pid && kill(0, $pid), "$signal: the scheduler process runs")) {
        system($bin, '-p', "$prefix/", '-c', 'conf/nginx.conf', '-s', 'stop');
        next;
    }
    system($bin, '-p', "$prefix/", '-c', 'conf/nginx.conf', '-s', $signal);
    my $gone = 0;
    for (1 .. 200) { if (!kill 0, $pid) { $gone = 1; last } Time::HiRes::sleep(0.05) }
    Test::More::ok($gone, "$signal: the scheduler process exited with nginx");
    open my $lf, '<', "$prefix/logs/error.log"; local $/; $log = <$lf> // '';
    Test::More::like($log, qr/srt: scheduler process $pid for model "s" exited/, "$signal: and said so");
    Test::More::unlike($log, qr/exited unexpectedly|\[alert\]/, "$signal: no alert");
}
--- request
GET /v1/models
--- response_body_like
"id":"smol"



=== TEST 5: a reload that changes the slot geometry (a new channel) still keeps one owner per model
--- init
package main;   # the real Test::Nginx evals init in its own package
use Time::HiRes ();
my $bin = $ENV{TEST_NGINX_BINARY} || 'nginx';
my $prefix = "$ENV{PWD}/t/servroot_srt/regeom";
system("rm -rf $prefix; mkdir -p $prefix/conf $prefix/logs");
my $write = sub {
    my ($ctx) = @_;
    open my $fh, '>', "$prefix/conf/nginx.conf" or die;
    print $fh <<"CONF";
load_module $ENV{TEST_NGINX_SRT_MODULE};
master_process on;
daemon on;
worker_processes 1;
pid $prefix/logs/nginx.pid;
error_log $prefix/logs/error.log info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $prefix/client_body_temp;
    proxy_temp_path $prefix/proxy_temp;
    fastcgi_temp_path $prefix/fastcgi_temp;
    uwsgi_temp_path $prefix/uwsgi_temp;
    scgi_temp_path $prefix/scgi_temp;
    server {
        listen 127.0.0.1:1987;
        location /v1/ { srt_model $ENV{TEST_NGINX_SRT_MODEL} name=s; srt_max_total_tokens 1024;
                        srt_context_length $ctx; srt_wait_ready 60s; }
    }
}
CONF
    close $fh;
};
my $log = sub { open my $lf, '<', "$prefix/logs/error.log"; local $/; <$lf> // '' };
$write->(512);
system($bin, '-p', "$prefix/", '-c', 'conf/nginx.conf') == 0 or die "nginx failed to start";
for (1 .. 400) { last if $log->() =~ /scheduler ready/; Time::HiRes::sleep(0.05) }
my $child = fork();
if ($child == 0) {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => 1987) or POSIX::_exit(1);
    my $body = '{"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0, "ignore_eos": true, "stream": true}';
    print $s "POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
    local $/;
    my $r = <$s> // '';
    POSIX::_exit($r =~ /data: \[DONE\]\n\n\z/ ? 0 : 1);
}
Time::HiRes::sleep(0.5);
$write->(256);
system($bin, '-p', "$prefix/", '-c', 'conf/nginx.conf', '-s', 'reload');
waitpid($child, 0);
Test::More::is($? >> 8, 0, "geometry reload: the stream in flight completed");
for (1 .. 400) { last if $log->() =~ /scheduler ready.*scheduler ready/s; Time::HiRes::sleep(0.05) }
my $text = $log->();
my @owners = $text =~ /srt: scheduler process (\d+) owns model "s"/g;
Test::More::is(scalar @owners, 2, "geometry reload: a second scheduler took the model");
Test::More::like($text, qr/scheduler process $owners[0] for model "s" exited.*scheduler process $owners[1] owns model/s,
                 "geometry reload: only after the first had exited");
system($bin, '-p', "$prefix/", '-c', 'conf/nginx.conf', '-s', 'stop');
--- request
GET /v1/models
--- response_body_like
"id":"smol"



=== TEST 6: under load, two reloads in a row fail no request
--- init
package main;   # the real Test::Nginx evals init in its own package
use Time::HiRes ();
my $port = Test::Nginx::Socket::server_port();
my $dir = "$ENV{PWD}/t/servroot_srt";
unlink glob "$dir/load-*";
my @kids;
for my $k (1 .. 6) {
    my $pid = fork();
    if ($pid == 0) {
        my $bad = 0;
        for my $j (1 .. 3) {
            my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or do { $bad++; next };
            my $stream = ($k + $j) % 2 ? 'true' : 'false';
            my $body = qq({"prompt": "Request $k $j:", "max_tokens": 20, "temperature": 0, "ignore_eos": true, "stream": $stream});
            print $s "POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
            local $/;
            my $r = <$s> // '';
            my $good = $r =~ m{^HTTP/1\.1 200 } && ($stream eq 'true' ? $r =~ /data: \[DONE\]\n\n\z/ : $r =~ /"completion_tokens":20,/);
            $bad++ unless $good;
        }
        open my $fh, '>', "$dir/load-$k";
        print $fh $bad;
        close $fh;
        POSIX::_exit(0);
    }
    push @kids, $pid;
}
open my $fh, '<', "${\ Test::Nginx::Socket::server_root()}/logs/nginx.pid" or die;
my $master = <$fh>;
chomp $master;
Time::HiRes::sleep(0.5);
kill 'HUP', $master;
Time::HiRes::sleep(1.5);
kill 'HUP', $master;
waitpid($_, 0) for @kids;
my $failed = 0;
for my $k (1 .. 6) {
    open my $in, '<', "$dir/load-$k" or do { $failed += 3; next };
    $failed += <$in>;
}
Test::More::is($failed, 0, "18 requests from 6 clients across 2 reloads: none failed");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like
"finish_reason":"length"
