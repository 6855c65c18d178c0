# Chaos: under continuous load (streamed and plain requests from 4 clients), each round does
# one random thing at a random moment: kill -9 or SIGSTOP the scheduler, kill -9 a worker,
# kill -9 or SIGSTOP the supervisor, or reload. Every request must be answered (200, or a
# clean failure: 503/504 in OpenAI's error JSON, or a stream that ends with an SSE error
# event and [DONE]) within its deadline; after each round the slots are all free again, and
# after nginx -s quit no process of it is left.
# 6 rounds by default; SRT_CHAOS_ROUNDS=N (or SRT_SOAK=1: 60 rounds) for the long version.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use POSIX ();
use Time::HiRes ();

master_on();
log_level('info');

our $Dir = srt_dir();
our $ROUNDS = $ENV{SRT_CHAOS_ROUNDS} || ($ENV{SRT_SOAK} ? 60 : 6);
our $SEED = $ENV{SRT_CHAOS_SEED} // int(rand(1 << 30));

# One client: requests until "$Dir/chaos-stop" exists; one line per request in its file:
# "ok", "clean STATUS" or "BAD what".
sub client {
    my ($k) = @_;
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    return $pid if $pid;
    srand($SEED + $k);
    open my $out, '>', "$Dir/chaos-$k" or POSIX::_exit(1);
    $out->autoflush(1);
    my $n = 0;
    until (-e "$Dir/chaos-stop") {
        my $stream = ($n++ + $k) % 2 ? 'true' : 'false';
        my $body = qq({"prompt": "Client $k request $n:", "max_tokens": @{[ 4 + int rand 40 ]}, "temperature": 0, "ignore_eos": true, "stream": $stream});
        my $t0 = Time::HiRes::time();
        my ($st, $b, $raw) = Test::Srt::http_request('POST', '/v1/completions', $body, {}, $main::Port);
        my $dt = Time::HiRes::time() - $t0;
        my $verdict;
        if ($dt > 45) {
            $verdict = "BAD took ${dt}s";
        } elsif ($st == 200 && $stream eq 'false' && $b =~ /"finish_reason":"length"/) {
            $verdict = 'ok';
        } elsif ($st == 200 && $stream eq 'true' && $b =~ /data: \[DONE\]\n\n\z/) {
            $verdict = $b =~ /\ndata: \{"error":/ ? 'clean 200-sse-error' : 'ok';
        } elsif (($st == 503 || $st == 504) && $b =~ /^\{"error":\{"message":"[^"]+","type":"server_error"/) {
            $verdict = "clean $st";
        } elsif (($st == 0 && $raw eq '') || ($st == 200 && $stream eq 'true' && $b !~ /\[DONE\]/)) {
            $verdict = 'reset';     # the connection died with its worker (kill -9), maybe mid-stream
        } else {
            $verdict = "BAD status $st: " . substr($raw, 0, 300) =~ s/\s+/ /gr;
        }
        print $out "$verdict\n";
    }
    close $out;
    POSIX::_exit(0);
}

our ($Ngx, $Port);

sub master { open my $fh, '<', "$Ngx->{prefix}/logs/nginx.pid" or return; my $p = <$fh>; chomp $p; $p }
sub kids_titled { my ($re) = @_; my $m = master() or return (); grep { /^\d+$/ } map { (split ' ')[0] } grep { $_ =~ $re } `ps -o pid=,args= --ppid $m` }
sub sched_pid { my @p = $Ngx->log =~ /srt: scheduler process (\d+) owns model/g; $p[-1] }
sub health { my (undef, $b) = Test::Srt::http_request('GET', '/v1/health', undef, {}, $Port); $b }

sub descendants {
    my $master = master() or return ();
    my @pids = ($master);
    for (my $i = 0; $i < @pids; $i++) {
        push @pids, grep { /^\d+$/ } map { (split ' ')[0] } `ps -o pid= --ppid $pids[$i]`;
    }
    return @pids;
}

sub chaos {
    srand($SEED);
    Test::More::diag("chaos seed $SEED (SRT_CHAOS_SEED), $ROUNDS rounds");
    $Port = server_port() + 5;
    $Ngx = private_nginx('chaos', $Port, $main::LOC);
    $Ngx->start or die "nginx failed to start";
    $Ngx->wait_log(qr/scheduler ready/, 60) or die "the model did not load";
    my %seen;
    my @actions = qw(kill_scheduler stop_scheduler kill_worker kill_supervisor stop_supervisor reload);
    for my $round (1 .. $ROUNDS) {
        unlink "$Dir/chaos-stop";
        my @kids = map { client($_) } 1 .. 4;
        $seen{$_} = 1 for descendants();
        select undef, undef, undef, 0.5 + rand 2;
        my $what = $actions[int rand @actions];
        $what = $actions[$round - 1] if $round <= @actions;   # each at least once
        my $sched = sched_pid();
        my ($helper) = kids_titled(qr/cache manager process/);
        my ($worker) = kids_titled(qr/worker process/);
        if ($what eq 'kill_scheduler') {
            kill 'KILL', $sched;
        } elsif ($what eq 'stop_scheduler') {
            kill 'STOP', $sched;     # srt_watchdog_timeout ends it
        } elsif ($what eq 'kill_worker') {
            kill 'KILL', $worker;
        } elsif ($what eq 'kill_supervisor') {
            kill 'KILL', $helper;
        } elsif ($what eq 'stop_supervisor') {
            kill 'STOP', $helper;
            select undef, undef, undef, 2;
            kill 'CONT', $helper;
        } else {
            $Ngx->signal('reload');
        }
        select undef, undef, undef, 2 + rand 2;
        open my $fh, '>', "$Dir/chaos-stop";
        close $fh;
        waitpid($_, 0) for @kids;
        my ($n, $ok, $reset, @bad) = (0, 0, 0);
        for my $k (1 .. 4) {
            open my $in, '<', "$Dir/chaos-$k" or do { push @bad, "client $k wrote nothing"; next };
            while (<$in>) {
                chomp;
                $n++;
                $ok++ if $_ eq 'ok';
                $reset++ if $_ eq 'reset';
                push @bad, $_ if /^BAD/;
            }
        }
        # only the connections a killed worker held (one per client at most) may die with it
        push @bad, "$reset connections reset" if $reset > ($what eq 'kill_worker' ? 4 : 0);
        Test::More::ok(!@bad && $n > 0, "round $round ($what): $n requests, $ok served, "
                       . ($n - $ok - $reset) . " failed cleanly, $reset lost with a killed worker, " . scalar(@bad) . " bad")
            or Test::More::diag(join "\n", @bad[0 .. ($#bad < 5 ? $#bad : 4)]);
        # back to baseline: serving, nothing running or queued, every slot free
        my ($base, $h) = (0, '');
        for (1 .. 600) {
            $h = health();
            if ($h =~ /"running":0,"queued":0,"slots_free":(\d+)/ && $1 == $main::SLOTS) { $base = 1; last }
            select undef, undef, undef, 0.1;
        }
        Test::More::ok($base, "round $round: back to baseline (every slot free)") or Test::More::diag($h);
    }
    $seen{$_} = 1 for descendants();
    $Ngx->signal('quit');
    my $left;
    for (1 .. 300) {
        $left = join ' ', grep { Test::Srt::alive($_) } keys %seen;
        last if $left eq '';
        select undef, undef, undef, 0.1;
    }
    Test::More::is($left, '', "after nginx -s quit no process of it is left (of " . scalar(keys %seen) . " seen)");
    Test::More::unlike($Ngx->log, qr/\[(emerg|crit)\]|exited on signal (?!9)/, "no crash in the log");
    $Ngx->stop if $left ne '';
}

our $SLOTS = 1 + 4;

our $LOC = 'srt_model ' . $ENV{TEST_NGINX_SRT_MODEL} . ' name=smol; srt_device cpu; srt_threads 2; '
    . 'srt_context_length 256; srt_max_total_tokens 2048; srt_max_running_requests 1; '
    . 'srt_max_queued_requests 4; srt_wait_ready 20s; srt_watchdog_timeout 2s; '
    . 'srt_queue_timeout 15s; srt_request_timeout 30s;';

srt_defaults(timeout => 600, config => <<'EOF2');
location /v1/ {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_device cpu;
    srt_threads 2;
}
EOF2

run_tests();

__DATA__

=== TEST 1: chaos rounds
--- init
package main;
chaos();
--- request
GET /v1/models
--- response_body_like chomp
"id":"smol"
