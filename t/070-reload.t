# nginx -s reload (HUP) while a request streams: the old scheduler finishes it, the new
# one takes the model over only then, and requests sent meanwhile are served, not failed.
# Every block starts from a fresh nginx, waits for the model, then reloads it itself.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use POSIX ();

master_on();
log_level('info');

our $Dir = srt_dir();

# Wait until the server on $port (default: the test server) runs a request.
sub wait_running {
    my ($port) = @_;
    for (1 .. 2000) {
        my (undef, $b) = Test::Srt::http_request('GET', '/v1/health', undef, {}, $port);
        return 1 if $b =~ /"running":[1-9]/;
        select undef, undef, undef, 0.005;
    }
    die "no request ran";
}

# A private nginx serving the tiny model with one worker, its scheduler ready; returns it and
# its srt_temp_path, where the doorbell files are (TESTs 9 and 10).
sub bells_nginx {
    my ($name, $port) = @_;
    my $ngx = private_nginx($name, $port, "srt_model $ENV{TEST_NGINX_SRT_TINY} name=t; srt_threads 1;");
    $ngx->start or die "nginx failed to start";
    $ngx->wait_log(qr/scheduler ready/, 30) or die "no scheduler";
    return ($ngx, "$ngx->{prefix}/srt_temp");
}

# Up to 15 s for a worker of the private nginx on $port to serve (the scheduler can be ready
# before the master forks the first worker, which opens the channel and binds its doorbell
# then; a respawned one loads its tokenizer). TESTs 10 and 11.
sub serves {
    my ($port) = @_;
    for (1 .. 300) {
        my (undef, undef, $r) = Test::Srt::http_request('POST', '/v1/completions',
                                                        '{"prompt": [1, 2, 3], "max_tokens": 2}', {}, $port);
        return 1 if $r =~ m{^HTTP/1\.1 200 };
        select undef, undef, undef, 0.05;
    }
    return 0;
}

# The master pid of a private nginx, from its pid file
sub master_of {
    my ($ngx) = @_;
    open my $fh, '<', "$ngx->{prefix}/logs/nginx.pid" or die "no pid file";
    my $p = <$fh>;
    chomp $p;
    return $p;
}

# Start a 480-token stream (about 2 s here; 300 tokens took 1.25 s, not much more than the
# 0.2 s before the HUP on a machine a few times faster), reload nginx (HUP) once it runs, and
# return the client's pid; the client writes the raw response to "$Dir/reload-stream-1".
sub reload_during_stream {
    Test::Srt::wait_ready();
    my @pids = start_clients($Dir, 'reload-stream', '/v1/completions',
        '{"prompt": "Once upon a time", "max_tokens": 480, "temperature": 0, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}');
    wait_running();
    select undef, undef, undef, 0.2;
    kill 'HUP', master_pid() or die "HUP: $!";
    select undef, undef, undef, 0.3;
    return $pids[0];
}

srt_defaults(timeout => 90, config => srt_location('/v1/', srt_max_total_tokens => 2048));

run_tests();

__DATA__

=== TEST 1: the model loads
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: reload while a stream is in flight; a new request is served
--- init
package main;
reload_during_stream();
--- request
POST /v1/completions
{"prompt": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28, 216, 38, 28], "max_tokens": 12, "temperature": 0}
--- response_body_like chomp
"text":" 7, 8, 9, 10","logprobs":null,"finish_reason":"length"



=== TEST 3: the stream that was in flight during the reload completed
--- init
package main;
my ($r) = wait_clients($main::Dir, 'reload-stream', reload_during_stream());
Test::More::like($r, qr/^HTTP\/1\.1 200 /, "streamed request: 200");
Test::More::like($r, qr/"completion_tokens":480,.*\ndata: \[DONE\]\n\n\z/s, "streamed request: all 480 tokens and [DONE]");
wait_log(qr/scheduler process \d+ owns model "smol"(?s:.*)scheduler process \d+ owns model "smol"/, 30);
my $text = error_log();
my @owners = $text =~ /srt: scheduler process (\d+) owns model "smol"/g;
Test::More::is(scalar @owners, 2, "the new scheduler took the model over after the old one");
Test::More::like($text, qr/scheduler process $owners[0] for model "smol" exited.*scheduler process $owners[1] owns model/s,
                 "... only once the old one had exited");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 4: nginx -s quit and -s stop: the scheduler processes exit with nginx
--- init
package main;
for my $signal (qw(quit stop)) {
    my $ngx = private_nginx("stop-$signal", server_port() + 2,
                            "srt_model $ENV{TEST_NGINX_SRT_MODEL} name=s; srt_max_total_tokens 1024;");
    $ngx->start or die "nginx failed to start";
    my $pid;
    if ($ngx->wait_log(qr/scheduler ready/, 20) && $ngx->log =~ /scheduler process (\d+) owns model/) {
        $pid = $1;
    }
    if (!Test::More::ok(alive($pid), "$signal: the scheduler process runs")) {
        $ngx->stop;
        next;
    }
    $ngx->signal($signal);
    my $gone = 0;
    for (1 .. 200) { if (!alive($pid)) { $gone = 1; last } select undef, undef, undef, 0.05 }
    Test::More::ok($gone, "$signal: the scheduler process exited with nginx");
    my $log = $ngx->log;
    Test::More::like($log, qr/srt: scheduler process $pid for model "s" exited/, "$signal: and said so");
    Test::More::unlike($log, qr/exited unexpectedly|\[alert\]/, "$signal: no alert");
}
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"



=== TEST 5: a reload that changes the slot geometry (a new channel) still keeps one owner per model
--- init
package main;
my $port = server_port() + 3;
my $loc = sub { "srt_model $ENV{TEST_NGINX_SRT_MODEL} name=s; srt_max_total_tokens 1024; "
                . "srt_context_length $_[0]; srt_wait_ready 60s;" };
my $ngx = private_nginx("regeom", $port, $loc->(512));
$ngx->start or die "nginx failed to start";
$ngx->wait_log(qr/scheduler ready/, 20);
my $child = fork();
if ($child == 0) {
    my (undef, undef, $r) = Test::Srt::http_request('POST', '/v1/completions',
        '{"prompt": "Once upon a time", "max_tokens": 480, "temperature": 0, "ignore_eos": true, "stream": true}',
        {}, $port);
    POSIX::_exit($r =~ /data: \[DONE\]\n\n\z/ ? 0 : 1);
}
main::wait_running($port);
select undef, undef, undef, 0.2;
$ngx->write($loc->(256));
$ngx->signal('reload');
waitpid($child, 0);
Test::More::is($? >> 8, 0, "geometry reload: the stream in flight completed");
$ngx->wait_log(qr/scheduler ready.*scheduler ready/s, 20);
my $text = $ngx->log;
my @owners = $text =~ /srt: scheduler process (\d+) owns model "s"/g;
Test::More::is(scalar @owners, 2, "geometry reload: a second scheduler took the model");
Test::More::like($text, qr/scheduler process $owners[0] for model "s" exited.*scheduler process $owners[1] owns model/s,
                 "geometry reload: only after the first had exited");
$ngx->stop;
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"



=== TEST 6: under load, two reloads in a row fail no request
--- init
package main;
Test::Srt::wait_ready();
# 6 clients send 100-token requests, streamed and not, until 1 s after the second reload: a
# fixed number of them (18, ~3 s here) ended before the second reload, 2 s in, on a machine
# 1.5 times as fast
unlink "$main::Dir/load-stop";
my @kids;
for my $k (1 .. 6) {
    my $pid = fork();
    if ($pid == 0) {
        my ($n, $bad) = (0, 0);
        until (-e "$main::Dir/load-stop") {
            $n++;
            my $stream = ($k + $n) % 2 ? 'true' : 'false';
            my (undef, undef, $r) = Test::Srt::http_request('POST', '/v1/completions',
                qq({"prompt": "Request $k $n:", "max_tokens": 100, "temperature": 0, "ignore_eos": true, "stream": $stream}));
            my $good = $r =~ m{^HTTP/1\.1 200 } && ($stream eq 'true' ? $r =~ /data: \[DONE\]\n\n\z/ : $r =~ /"completion_tokens":100,/);
            $bad++ unless $good;
        }
        open my $fh, '>', "$main::Dir/load-$k";
        print $fh "$n $bad";
        close $fh;
        POSIX::_exit(0);
    }
    push @kids, $pid;
}
select undef, undef, undef, 0.5;
kill 'HUP', master_pid();
select undef, undef, undef, 1.5;
kill 'HUP', master_pid();
select undef, undef, undef, 1;
open my $stop, '>', "$main::Dir/load-stop";
close $stop;
waitpid($_, 0) for @kids;
my ($sent, $failed) = (0, 0);
for my $k (1 .. 6) {
    open my $in, '<', "$main::Dir/load-$k" or do { $failed++; next };
    my ($n, $bad) = split ' ', <$in> // '';
    close $in;
    unlink "$main::Dir/load-$k";
    $sent += $n // 0;
    $failed += defined $bad ? $bad : 1;
}
unlink "$main::Dir/load-stop";
Test::More::is($failed, 0, "$sent requests from 6 clients across 2 reloads: none failed");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 2, "temperature": 0}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 7: quit, and a reload that gives the model a new channel, while a body is still arriving: answered, nginx exits
The worker got the rest of the body after its scheduler had stopped; the scheduler used to
publish HANDOVER on every graceful stop, the request was queued for a successor that never
came and nginx never exited.
--- init
package main;
use IO::Socket::INET ();
my $port = server_port() + 4;
my $loc = sub { "srt_model $ENV{TEST_NGINX_SRT_MODEL} name=s; srt_max_total_tokens 1024; "
                . "srt_context_length $_[0]; srt_wait_ready 60s;" };
for my $how (qw(quit reload)) {
    my $ngx = private_nginx("late-body-$how", $port, $loc->(512));
    $ngx->start or die "nginx failed to start";
    $ngx->wait_log(qr/scheduler ready/, 30) or die "no scheduler";
    my ($master) = `cat $ngx->{prefix}/logs/nginx.pid` =~ /(\d+)/;
    my $body = '{"prompt": "Hello", "max_tokens": 4}';
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 5)
        or die "connect: $!";
    print $s "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
           . "Content-Type: application/json\r\nContent-Length: " . length($body) . "\r\n\r\n"
           . substr($body, 0, 10);
    select undef, undef, undef, 0.3;
    if ($how eq 'reload') {
        $ngx->write($loc->(256));
    }
    $ngx->signal($how);
    select undef, undef, undef, 2;
    print $s substr($body, 10);
    my $t0 = Time::HiRes::time();
    my $resp = '';
    my $sel = IO::Select->new($s);
    while (Time::HiRes::time() - $t0 < 30 && $sel->can_read(30 - (Time::HiRes::time() - $t0))) {
        my $n = sysread($s, my $buf, 65536);
        last unless $n;
        $resp .= $buf;
    }
    Test::More::like($resp, qr{^HTTP/1\.1 (200|503) .*\r\n\r\n\{}s,
                     "$how: the request whose body finished late is answered ("
                     . (($resp =~ /^(HTTP\S+ \d+)/)[0] // 'nothing') . ")");
    Test::More::unlike($ngx->log, qr/\[alert\]/, "$how: no alert");
    if ($how eq 'quit') {
        my $gone = 0;
        for (1 .. 200) { if (!kill(0, $master)) { $gone = 1; last } select undef, undef, undef, 0.05 }
        Test::More::ok($gone, "quit: nginx exited within 10 s of the answer");
    } else {
        Test::More::ok($ngx->wait_log(qr/scheduler ready(?s:.*)scheduler ready/, 30),
                       "reload: the new channel's scheduler is ready");
        my (undef, undef, $r) = Test::Srt::http_request('POST', '/v1/completions', $body, {}, $port);
        Test::More::like($r, qr{^HTTP/1\.1 200 }, "reload: and serves");
        $ngx->stop;
    }
}
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"



=== TEST 8: quit, and a reload that gives the model a new channel, then the old scheduler dies while it finishes a stream: the stream fails at once, nginx exits
The helper used to exit at once, leaving the old scheduler unwatched, and no successor would
open its channel to reclaim what it ran: the stream hung, and nginx never finished quitting.
--- init
package main;
use IO::Socket::INET ();
my $port = server_port() + 5;
# SmolLM2, 4000 tokens: ~30 s here on one thread, so the stream still runs when its scheduler is
# killed, some 0.1 s after the quit, on a machine many times as fast (the tiny model's 2000 tokens
# took 0.7 s here: too near)
my $loc = sub { "srt_model $ENV{TEST_NGINX_SRT_MODEL} name=t; srt_threads 1; srt_max_total_tokens 8192; "
                . "srt_context_length $_[0]; srt_wait_ready 60s;" };
for my $how (qw(quit reload)) {
    my $ngx = private_nginx("orphan-$how", $port, $loc->(4096));
    $ngx->start or die "nginx failed to start";
    $ngx->wait_log(qr/scheduler ready/, 30) or die "no scheduler";
    my ($master) = `cat $ngx->{prefix}/logs/nginx.pid` =~ /(\d+)/;
    my ($helper, $sched) = $ngx->log =~ /(\d+)#\d+: srt: scheduler process (\d+) started for model/
        or die "no helper or scheduler in the log";
    my $body = '{"prompt": [1, 2, 3], "max_tokens": 4000, "temperature": 0, "ignore_eos": true, "stream": true}';
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 5)
        or die "connect: $!";
    print $s "POST /v1/completions HTTP/1.0\r\nHost: localhost\r\n"
           . "Content-Type: application/json\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
    my $sel = IO::Select->new($s);
    my $resp = '';
    while ($resp !~ /"text"/ && $sel->can_read(10)) {
        sysread($s, my $buf, 65536) or last;
        $resp .= $buf;
    }
    $ngx->write($loc->(2048)) if $how eq 'reload';
    $ngx->signal($how);
    # once the helper's event loop is over, only its exit path still watches the scheduler
    $ngx->wait_log(qr/\b$helper#$helper: exiting/, 10) or die "the helper did not exit";
    kill 'KILL', $sched;
    my $t0 = Time::HiRes::time();
    while ((my $left = 15 - (Time::HiRes::time() - $t0)) > 0) {
        last unless $sel->can_read($left);
        sysread($s, my $buf, 65536) or last;
        $resp .= $buf;
    }
    Test::More::like($resp, qr/"message":"scheduler process $sched exited".*\ndata: \[DONE\]\n\n\z/s,
                     "$how: the stream fails once its scheduler dies ("
                     . sprintf('%.1f s', Time::HiRes::time() - $t0) . ")");
    Test::More::like($ngx->log, qr/scheduler process $sched for model "t" exited unexpectedly while stopping/,
                     "$how: the helper said so");
    if ($how eq 'quit') {
        my $gone = 0;
        for (1 .. 200) { if (!alive($master)) { $gone = 1; last } select undef, undef, undef, 0.05 }
        Test::More::ok($gone, "quit: nginx exited");
        $ngx->stop unless $gone;
        close $s;
    } else {
        close $s;
        Test::More::ok($ngx->wait_log(qr/scheduler ready(?s:.*)scheduler ready/, 30),
                       "reload: the new channel's scheduler is ready");
        my (undef, undef, $r) = Test::Srt::http_request('POST', '/v1/completions',
            '{"prompt": [1, 2, 3], "max_tokens": 2}', {}, $port);
        Test::More::like($r, qr{^HTTP/1\.1 200 }, "reload: and serves");
        $ngx->stop;
    }
}
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"



=== TEST 9: a worker that exits on a reload takes its doorbell file out of srt_temp_path
One socket file per model and worker used to stay behind there with every reload.
--- init
package main;
my $port = server_port() + 6;
my ($ngx, $dir) = bells_nginx("bells", $port);
# the doorbell files of processes that are gone
my $stale = sub {
    opendir my $dh, $dir or return -1;
    return scalar grep { /-w(\d+)\z/ && !alive($1) } readdir $dh;
};
for my $n (1 .. 3) {
    $ngx->signal('reload');
    $ngx->wait_log(qr/(?:worker process \d+ exited(?s:.*)){$n}/, 20) or die "reload $n: no worker exited";
}
my $left = -1;
for (1 .. 40) { $left = $stale->(); last if $left == 0; select undef, undef, undef, 0.05 }
Test::More::is($left, 0, "3 reloads: no doorbell file of an exited worker left");
my (undef, undef, $r) = Test::Srt::http_request('POST', '/v1/completions', '{"prompt": [1, 2, 3], "max_tokens": 2}',
                                                {}, $port);
Test::More::like($r, qr{^HTTP/1\.1 200 }, "and the model serves");
$ngx->stop;
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"



=== TEST 10: a worker killed with -9: the worker started after it removes its doorbell file
A worker that never detaches left its socket file in srt_temp_path until its pid came round
again: one file per kill.
--- init
package main;
my $port = server_port() + 7;
my ($ngx, $dir) = bells_nginx("bells9", $port);
my $bells = sub {
    opendir my $dh, $dir or return ();
    return grep { /-w\d+\z/ } readdir $dh;
};
my $master = master_of($ngx);
serves($port) or die "the first worker does not serve";
for my $n (1 .. 3) {
    my ($w) = map { (split ' ')[0] } grep { /worker process/ } `ps -o pid=,args= --ppid $master`;
    $w or die "kill $n: no worker";
    kill 'KILL', $w;
    $ngx->wait_log(qr/(?:exited on signal 9(?s:.*)){$n}/, 20) or die "kill $n: no exit logged";
    serves($port) or die "kill $n: the new worker does not serve";
}
my @left = $bells->();
Test::More::is(scalar(grep { /-w(\d+)\z/ && !alive($1) } @left), 0,
               "3 workers killed with -9: no doorbell file of theirs left (@left)");
Test::More::is(scalar @left, 1, "one doorbell file: the live worker's");
$ngx->stop;
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"


=== TEST 11: srt_temp_path keeps no file of an nginx that stopped, nor of one killed with -9
Every start left its scheduler's doorbell, the channel's lock and the master's key lock there,
and no stop removed them: three files a start. A stop removes its own; a start removes what
no live process holds (here: what an nginx killed with -9 left, a worker's doorbell too).
--- init
package main;
my $port = server_port() + 8;
my ($ngx, $dir) = bells_nginx("bells11", $port);
my $files = sub {
    opendir my $dh, $dir or return ();
    return sort grep { !/^\./ } readdir $dh;
};
# up to 10 s for the files in $dir to satisfy $ok
my $settle = sub {
    my ($ok) = @_;
    for (1 .. 200) {
        my @f = $files->();
        return @f if $ok->(@f);
        select undef, undef, undef, 0.05;
    }
    return $files->();
};
serves($port) or die "the first nginx does not serve";   # so the worker's doorbell is there too
my @first = $files->();
Test::More::ok((grep { /-sched\z/ } @first) && (grep { /-sched\.lock\z/ } @first) && (grep { /^lock-/ } @first)
               && (grep { /-w\d+\z/ } @first), "running: two doorbells, the channel's lock and a key lock (@first)");
# the master and every process under it, killed with -9
my @all = (master_of($ngx));
for (my $i = 0; $i < @all; $i++) {
    push @all, map { (split ' ')[0] } `ps -o pid= --ppid $all[$i]`;
}
kill 'KILL', @all;
for (1 .. 200) { last unless grep { alive($_) } @all; select undef, undef, undef, 0.05 }
my @left = $files->();
Test::More::is("@left", "@first", "killed with -9: its files stay behind");
unlink "$ngx->{prefix}/logs/error.log";
$ngx->start or die "nginx failed to start again";
$ngx->wait_log(qr/scheduler ready/, 30) or die "no scheduler after the restart";
my %old = map { $_ => 1 } @first;
my @now = $settle->(sub { !grep { $old{$_} } @_ });
Test::More::is(scalar(grep { $old{$_} } @now), 0, "the next start removed them (now: @now)");
Test::More::ok(serves($port), "and the model serves");
$ngx->signal('quit');
my @end = $settle->(sub { !@_ });
Test::More::is("@end", "", "after a quit nothing is left");
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"
