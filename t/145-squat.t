# Another local user must not be able to take a model, or all of nginx, down by binding
# the names of its doorbell and lock sockets first. They used to live in Linux's abstract
# namespace, open to every user and listed in /proc/net/unix: as "nobody", binding the
# model's lock kept it at 503 after its scheduler died, and binding the doorbell names of
# the next pids left nginx without workers after a reload. They are now files in
# srt_temp_path, a 0700 directory of the workers' user. The squatter below runs as
# "nobody" (or "daemon" when the workers are nobody: always another user) and tries both.
use Test::Nginx::Socket 'no_plan';
use FindBin (); use lib "$FindBin::Bin/lib";
use Test::Srt;
use POSIX ();

master_on();
log_level('info');

our $Dir = srt_dir();
our $Squatter = ($ENV{TEST_NGINX_WORKER_USER} // '') =~ /^nobody\b/ ? 'daemon' : 'nobody';

# The names of the unix sockets the processes of our nginx hold (master, workers, helper,
# schedulers): other nginx instances on this machine are none of this test's business.
sub our_socket_names {
    my $master = master_pid() or return ();
    my @pids = ($master);
    for (my $i = 0; $i < @pids; $i++) {
        push @pids, grep { /^\d+$/ } map { (split ' ')[0] } `ps -o pid= --ppid $pids[$i]`;
    }
    my %inodes;
    for my $pid (@pids) {
        opendir my $d, "/proc/$pid/fd" or next;
        for (readdir $d) {
            my $l = readlink("/proc/$pid/fd/$_") // next;
            $inodes{$1} = 1 if $l =~ /^socket:\[(\d+)\]$/;
        }
    }
    open my $fh, '<', '/proc/net/unix' or die "/proc/net/unix: $!";
    my @names;
    while (<$fh>) {
        my @f = split ' ';
        push @names, $f[7] if defined $f[7] && $inodes{$f[6]};
    }
    return @names;
}

# The squatter: binds every name of our nginx it can guess from /proc/net/unix: the lock of
# the model and the doorbells of the next 300 pids, in the abstract namespace and in the
# directory the sockets are in. It prints how many binds succeeded and holds what it bound
# until its standard input closes. Run with perl -e, so that it needs to read no file of the
# clone (which "nobody" may not be allowed to).
our $SquatCode = <<'PERL';
use strict; use warnings;
use Socket qw(AF_UNIX SOCK_DGRAM SOCK_STREAM pack_sockaddr_un);
my ($master, $model, $maxpid, $ids, $dirs) = @ARGV;
my @ids = grep { length } split /,/, $ids;
my @dirs = grep { length } split /,/, $dirs;
my (%ok, %tried, @keep);
my $try = sub {
    my ($type, $path) = @_;
    my $kind = $path =~ /^\0/ ? 'abstract' : 'files';
    socket(my $s, AF_UNIX, $type, 0) or return;
    $tried{$kind}++;
    $ok{$kind} //= 0;
    if (bind($s, pack_sockaddr_un($path))) {
        listen($s, 5) if $type == SOCK_STREAM;
        $ok{$kind}++;
        push @keep, $s;
    }
};
$try->(SOCK_STREAM, "\0srt-lock-$master-$model");
for my $id (@ids) {
    for my $p ($maxpid + 1 .. $maxpid + 300) {
        $try->(SOCK_DGRAM, "\0srt-$id-w$p");
        $try->(SOCK_DGRAM, "$_/$id-w$p") for @dirs;
    }
    $try->(SOCK_DGRAM, "$_/$id-sched.lock") for @dirs;
}
$try->(SOCK_DGRAM, "$_/lock-$master-$model") for @dirs;
$| = 1;
print "ids=" . join(',', @ids) . " dirs=" . join(',', @dirs)
      . join('', map { " $_=$ok{$_}/$tried{$_}" } sort keys %tried) . "\n";
# the lock is free for a moment when its holder dies: take it then; stop when told (EOF)
my $deadline = time + 120;
my $rin = '';
vec($rin, fileno(STDIN), 1) = 1;
while (time < $deadline) {
    last if select(my $r = $rin, undef, undef, 0.002);
    socket(my $s, AF_UNIX, SOCK_STREAM, 0) or last;
    if (bind($s, pack_sockaddr_un("\0srt-lock-$master-$model")) && listen($s, 5)) {
        push @keep, $s;
        last;
    }
}
alarm 600;
1 while sysread STDIN, my $buf, 64;
PERL

# Starts the squatter as $Squatter: by setuid when the suite runs as root, else through
# `sudo -n` (README: the tests run as root or as a user with sudo). Returns its pid, its
# report and the pipe whose closing stops it.
sub squat {
    my ($model) = @_;
    my $master = master_pid();
    my (%ids, %dirs);
    for (our_socket_names()) {
        next unless m{^(.*?)/?(?:srt-)?([0-9a-f]{16})-(?:w(\d+)|sched)$};
        $ids{$2} = 1;
        $dirs{$1} = 1 if $1 ne '' && $1 ne '@';
    }
    open my $pm, '<', '/proc/sys/kernel/ns_last_pid' or die $!;
    my $maxpid = <$pm> + 0;
    pipe(my $rd, my $wr) or die "pipe: $!";
    pipe(my $cin, my $stop) or die "pipe: $!";
    my @cmd = ($^X, '-e', $main::SquatCode, $master, $model, $maxpid,
               join(',', keys %ids), join(',', keys %dirs));
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        close $rd;
        close $stop;
        open STDOUT, '>&', $wr or POSIX::_exit(3);
        open STDIN, '<&', $cin or POSIX::_exit(3);
        if ($> == 0) {
            my ($uid, $gid) = (getpwnam($main::Squatter))[2, 3];
            POSIX::setgid($gid);
            $) = "$gid $gid";
            POSIX::setuid($uid) or POSIX::_exit(3);
            exec @cmd;
        } else {
            exec 'sudo', '-n', '-u', $main::Squatter, @cmd;
        }
        POSIX::_exit(3);
    }
    close $wr;
    close $cin;
    my $report = <$rd> // ($> == 0 ? 'no report' : "no report (not root: needs sudo -n -u $main::Squatter)");
    chomp $report;
    return ($pid, $report, $stop);
}

srt_defaults(timeout => 60, config => <<'EOF2');
location /v1/ {
    srt_model $TEST_NGINX_SRT_MODEL name=smol;
    srt_device cpu;
    srt_threads 2;
    srt_context_length 256;
    srt_max_total_tokens 1024;
    srt_wait_ready 30s;
}
EOF2

run_tests();

__DATA__

=== TEST 1: no doorbell or lock of ngx_srt is in the abstract namespace; the directory is 0700
--- init
package main;
Test::Srt::wait_ready();
my @names = our_socket_names();
Test::More::cmp_ok(scalar(grep { m{/[0-9a-f]{16}-w\d+$} } @names), '>=', 1, "a worker doorbell is a file")
    or Test::More::diag("@names");
Test::More::is(scalar(grep { /^\@/ } @names), 0, "no abstract names") or Test::More::diag("@names");
my @st = stat(Test::Srt::servroot() . '/srt_temp');
Test::More::is(sprintf('%o', $st[2] & 07777), '700', "srt_temp_path is mode 0700");
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1}
--- response_body_like chomp
"finish_reason":"length"



=== TEST 2: another user binds every name it can guess; a killed scheduler comes back, a reload starts workers
--- init
package main;
Test::Srt::wait_ready();
my ($squatter, $r, $stop) = squat('smol');
# the abstract names are free for anyone, and no longer used; files cannot be made
Test::More::like($r, qr/ids=[0-9a-f]{16}.* files=0\/\d{3,}$/, "the squatter could bind no file ($r)");
my $sched = Test::Srt::scheduler_pid();
kill 'KILL', $sched;
Test::More::ok(eval { Test::Srt::wait_ready('/v1', 30) }, "a new scheduler serves the model after kill -9 of $sched")
    or Test::More::diag($@);
kill 'HUP', master_pid();
select undef, undef, undef, 1.5;
Test::More::ok(eval { Test::Srt::wait_ready('/v1', 30) }, "ready after a reload") or Test::More::diag($@);
my @workers = child_pids(qr/worker process/);
Test::More::cmp_ok(scalar @workers, '>=', 1, "the reload left workers running");
Test::More::unlike(Test::Srt::error_log(), qr/cannot be respawned|worker doorbell/, "no worker failed to bind its doorbell");
close $stop;
waitpid($squatter, 0);
--- request
POST /v1/completions
{"prompt": "Hello", "max_tokens": 1}
--- response_body_like chomp
"finish_reason":"length"
