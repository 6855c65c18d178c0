# Client disconnects abort requests in the scheduler and free their slots; the scheduler
# process is respawned after kill -9; requests wait (srt_wait_ready) or get 503 meanwhile.
# Blocks with the same config share one nginx (and one loaded model), under this harness
# and the real Test::Nginx alike (TEST_NGINX_FORCE_RESTART_ON_TEST=0; set it to 1 to
# restart nginx for every block, the real module's default).
BEGIN { $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST} //= 0 }
use Test::Nginx::Socket 'no_plan';
use POSIX ();

BEGIN {
    $ENV{TEST_NGINX_SRT_MODULE} ||= "$ENV{PWD}/build/nginx/ngx_http_srt_module.so";
    $ENV{TEST_NGINX_SRT_MODEL} ||= ($ENV{SRT_MODEL_DIR} || "$ENV{PWD}/.cache/models")
                                   . "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

master_on();
log_level('info');

our $Log = "${\ Test::Nginx::Socket::server_root()}/logs/error.log";

# the pid of the scheduler process that owns the model now, from nginx's error log
sub scheduler_pid {
    open my $fh, '<', $Log or return undef;
    my $pid;
    while (<$fh>) { $pid = $1 if /srt: scheduler process (\d+) owns model/ }
    return $pid;
}

sub wait_log {
    my ($re, $secs) = @_;
    for (1 .. $secs * 20) {
        open my $fh, '<', $Log or next;
        local $/;
        my $text = <$fh>;
        return 1 if $text =~ $re;
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
    srt_context_length 1024;
    srt_max_running_requests 4;
    srt_max_queued_requests 4;
    srt_max_total_tokens 4096;
    srt_wait_ready 60s;
}
location /nowait {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
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



=== TEST 2: client goes away mid-stream: the request is aborted
--- request
POST /v1/completions
{"prompt": "Once upon a time", "max_tokens": 900, "temperature": 0, "ignore_eos": true, "stream": true}
--- timeout: 1.5
--- abort
--- wait: 1
--- error_log eval
qr/srt: (client closed the connection|writing to the client failed), aborting the request/



=== TEST 3: ... and its slot and KV are free again (4 running + 4 queued slots)
--- request
GET /v1/health
--- response_body_like
^\{"status":"ok","model":"smol","running":0,"queued":0,"slots_free":8,"requests_total":\d+\}$



=== TEST 4: client goes away while waiting for a non-streamed answer
--- request
POST /v1/completions
{"prompt": "Once upon a time", "max_tokens": 900, "temperature": 0, "ignore_eos": true}
--- timeout: 1.5
--- abort
--- wait: 1
--- error_log
srt: client closed the connection, aborting the request



=== TEST 5: ... freed too
--- request
GET /v1/health
--- response_body_like
^\{"status":"ok","model":"smol","running":0,"queued":0,"slots_free":8,"requests_total":\d+\}$



=== TEST 6: kill -9 of the scheduler: the master's helper respawns it with a backoff
--- init
package main;   # the real Test::Nginx evals init in its own package
my $pid = main::scheduler_pid() or die "no scheduler pid in the log";
kill 'KILL', $pid;
main::wait_log(qr/scheduler process $pid for model "smol" exited unexpectedly; respawning in \d+ ms/, 10)
    or die "the supervisor did not notice";
--- request
GET /nowait/health
--- error_code: 503
--- response_headers
Retry-After: 1
--- response_body_like
"message":"Model \\"smol\\" is (not available|loading)



=== TEST 7: requests wait for the respawned scheduler and are served by it
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"
--- error_log eval
qr/srt: scheduler process \d+ owns model "smol"/



=== TEST 8: a request in flight when the scheduler dies fails cleanly (503 JSON), never hangs
--- init
package main;   # the real Test::Nginx evals init in its own package
if (my $child = fork()) {
    # kill the scheduler while it generates for the request below
} else {
    select undef, undef, undef, 1.0;
    kill 'KILL', main::scheduler_pid();
    POSIX::_exit(0);
}
--- request
POST /v1/completions
{"prompt": "Once upon a time", "max_tokens": 900, "temperature": 0, "ignore_eos": true}
--- error_code: 503
--- response_body_like
"message":"Generation failed: scheduler process \d+ exited","type":"server_error"



=== TEST 9: and the next request is served again
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like
"finish_reason":"length"



=== TEST 10a: kill -9 of the helper (supervisor): the master respawns it, its scheduler hands over
--- init
package main;   # the real Test::Nginx evals init in its own package
open my $fh, '<', "${\ Test::Nginx::Socket::server_root()}/logs/nginx.pid" or die;
my $master = <$fh>;
chomp $master;
my ($helper) = map { (split ' ')[0] } grep { /cache manager process/ } `ps -o pid=,args= --ppid $master`;
my $old = main::scheduler_pid();
Test::More::ok($helper && $old, "found the helper ($helper) and its scheduler ($old)");
kill 'KILL', $helper;
main::wait_log(qr/scheduler process $old for model "smol" exited/, 20)
    or Test::More::fail("the orphaned scheduler did not exit");
main::wait_log(qr/scheduler process (?!$old)\d+ owns model "smol"/, 20)
    or Test::More::fail("no new scheduler took over");
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"



=== TEST 10: kill -9 of a worker with a request in flight: the scheduler reclaims its slot
--- init
package main;   # the real Test::Nginx evals init in its own package
use IO::Socket::INET;
my $port = Test::Nginx::Socket::server_port();
my $get = sub {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or return '';
    print $s "GET /v1/health HTTP/1.0\r\nHost: x\r\n\r\n";
    local $/;
    return <$s> // '';
};
my $child = fork();
if ($child == 0) {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or POSIX::_exit(1);
    my $body = '{"prompt": "Once upon a time", "max_tokens": 900, "temperature": 0, "ignore_eos": true}';
    print $s "POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
    local $/;
    my $r = <$s>;
    POSIX::_exit(0);
}
for (1 .. 200) { last if $get->() =~ /"running":1/; select undef, undef, undef, 0.05 }
open my $fh, '<', "${\ Test::Nginx::Socket::server_root()}/logs/nginx.pid" or die;
my $master = <$fh>;
chomp $master;
my @workers = grep { /^\d+$/ } map { (split ' ')[0] } grep { /nginx: worker process/ }
              `ps -o pid=,args= --ppid $master`;
Test::More::ok(scalar @workers, "found the worker (@workers)");
kill 'KILL', @workers;
waitpid($child, 0);
# reclaim runs once a second; the 900-token request alone would take far longer
for (1 .. 30) { last if $get->() =~ /"running":0,"queued":0,"slots_free":8,/; select undef, undef, undef, 0.1 }
--- request
GET /v1/health
--- response_body_like
"running":0,"queued":0,"slots_free":8,



=== TEST 11: a file that is not a model: the scheduler fails to load it, requests get 503 with the reason
--- config
location /v1 {
    srt_model $TEST_NGINX_SERVER_ROOT/conf/nginx.conf name=junk;
}
--- init
package main;   # the real Test::Nginx evals init in its own package
select undef, undef, undef, 1.5;
--- request
POST /v1/completions
{"prompt": [1, 2, 3], "max_tokens": 1}
--- error_code: 503
--- response_headers
Retry-After: 1
--- response_body_like
"message":"Model \\"junk\\" is not available: [^"]+","type":"server_error","param":null,"code":"model_unavailable"
