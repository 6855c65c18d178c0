package Test::Srt;

# What the t/*.t suites share: where the module and the models are, the default nginx
# configuration of a suite's blocks, and helpers for `--- init` code (wait for the model,
# plain HTTP exchanges, the error log, the scheduler's and nginx's pids, background
# clients, a private nginx for tests that signal it themselves).
#
# It uses only Test::Nginx::Socket's public API (add_block_preprocessor, server_root,
# server_port) and plain Perl, so it works under this directory's harness and under
# openresty's Test::Nginx::Socket alike. Load it after Test::Nginx::Socket:
#
#     use Test::Nginx::Socket 'no_plan';
#     use FindBin (); use lib "$FindBin::Bin/lib";   # t/lib, for this module
#     use Test::Srt;
#
# Its functions are exported into main. `--- init` code is eval'd in package
# Test::Nginx::Util under strict: start it with `package main;` to call them by name.

use strict;
use warnings;

use Exporter ();
use IO::Socket::INET ();
use POSIX ();
use Time::HiRes ();
use IO::Select ();
use Cwd ();
use File::Basename ();
use File::Path ();

our @ISA = ('Exporter');
our @EXPORT = qw(srt_defaults srt_location srt_location_also srt_dir http_get http_request wait_ready wait_model_status
                 wait_scheduler_failed error_log wait_log count_log scheduler_pid alive
                 master_pid child_pids kill_scheduler_after start_clients wait_clients
                 abort_after tap_lines client_checks private_nginx);

# the repository: this file is t/lib/Test/Srt.pm
my $Root = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../../..');

# Paths every suite uses; each may be overridden from the environment.
$ENV{TEST_NGINX_SRT_MODULE} ||= "$Root/build/nginx/ngx_http_srt_module.so";
$ENV{TEST_NGINX_SRT_MODEL_DIR} ||= $ENV{SRT_MODEL_DIR} || "$Root/.cache/models";
$ENV{TEST_NGINX_SRT_MODEL} ||= "$ENV{TEST_NGINX_SRT_MODEL_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf";
$ENV{TEST_NGINX_SRT_TINY} ||= "$ENV{TEST_NGINX_SRT_MODEL_DIR}/tiny-llama";
$ENV{TEST_NGINX_SRT_HOOK_LIB} ||= "$Root/build/lib";

# A scratch directory beside t/servroot for files the tests write themselves (the
# harnesses wipe parts of t/servroot before every block).
# Under a root master whose workers run as TEST_NGINX_WORKER_USER, the directory (and those
# above it up to t/servroot_srt) belongs to that user: hooks in the scheduler write there too.
sub srt_dir {
    my ($sub) = @_;
    my $base = "$Root/t/servroot_srt";
    my $dir = $base . (defined $sub ? "/$sub" : '');
    File::Path::make_path($dir);
    my $u = $ENV{TEST_NGINX_WORKER_USER};
    if ($> == 0 && defined $u && length $u) {
        my ($name, $group) = split ' ', $u;
        my (undef, undef, $uid, $gid) = getpwnam($name);
        $gid = (getgrnam($group))[2] if defined $group;
        if (defined $uid && $uid != 0) {
            for (my $d = $dir; length($d) >= length($base); $d =~ s{/[^/]+$}{}) {
                chown $uid, $gid, $d;
            }
        }
    }
    return $dir;
}

sub tn { no strict 'refs'; return &{"Test::Nginx::Socket::$_[0]"}() }
sub port { tn('server_port') }
sub servroot { tn('server_root') }

# Default sections for every block that does not set its own:
#   srt_defaults(config => $text, http_config => $text, main_config => $extra,
#                timeout => $secs)
# main_config always starts with `load_module` of the module under test.
sub srt_defaults {
    my (%d) = @_;
    my $main = "load_module $ENV{TEST_NGINX_SRT_MODULE};";
    $main .= "\n$d{main_config}" if defined $d{main_config};
    Test::Nginx::Socket::add_block_preprocessor(sub {
        my $block = shift;
        $block->set_value('main_config', $main) unless defined $block->main_config;
        for my $sec (qw(http_config config timeout)) {
            next unless defined $d{$sec};
            $block->set_value($sec, $d{$sec}) unless defined $block->$sec;
        }
    });
}

# The location most suites serve SmolLM2 from, as `--- config` text: the model named "smol"
# on the CPU with 2 threads, a 512-token context, 4096 tokens of KV cache, requests waiting
# 60 s for the model. @set (directive => value pairs, in order) replaces a default's value
# (undef drops it) or adds a directive after them:
#   srt_location('/v1/', srt_max_total_tokens => 2048, srt_server_timing => 'on')
# `--- config eval` of a block calls it as Test::Srt::srt_location(...): the real harness
# evals sections in a package of its own.
my @Served = (srt_model => '$TEST_NGINX_SRT_MODEL name=smol', srt_device => 'cpu', srt_threads => 2,
              srt_context_length => 512, srt_max_total_tokens => 4096, srt_wait_ready => '60s');

sub srt_location {
    my ($prefix, @set) = @_;
    my (@names, %value);
    for my $pairs (\@Served, \@set) {
        for (my $i = 0; $i < @$pairs; $i += 2) {
            push @names, $pairs->[$i] unless exists $value{ $pairs->[$i] };
            $value{ $pairs->[$i] } = $pairs->[$i + 1];
        }
    }
    return "location $prefix {\n" . join('', map { "    $_ $value{$_};\n" } grep { defined $value{$_} } @names)
         . "}\n";
}

# Another location of the model an earlier srt_location serves: srt_model and srt_wait_ready
# only (the model's settings are its first location's), then @set.
sub srt_location_also {
    my ($prefix, @set) = @_;
    return srt_location($prefix, (map { $_ => undef } qw(srt_device srt_threads srt_context_length
                                                         srt_max_total_tokens)), @set);
}

# One HTTP/1.0 exchange with the test server:
#   my ($status, $body, $raw) = http_request('POST', '/v1/completions', $json, \%headers);
# $status is 0 when nothing came back.
sub http_request {
    my ($method, $uri, $body, $headers, $port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port || port(),
                                  Timeout => 120) or return (0, '', '');
    my $req = "$method $uri HTTP/1.0\r\nHost: localhost\r\n";
    $req .= "$_: $headers->{$_}\r\n" for sort keys %{ $headers || {} };
    $req .= "Content-Type: application/json\r\nContent-Length: " . length($body) . "\r\n"
        if defined $body;
    print $s $req, "\r\n", $body // '';
    local $/;
    my $raw = <$s> // '';
    close $s;
    my ($head, $b) = split /\r\n\r\n/, $raw, 2;
    my ($status) = ($head // '') =~ m{^HTTP/\S+ (\d+)};
    return ($status // 0, $b // '', $raw);
}

sub http_get { my @r = http_request('GET', @_); return wantarray ? @r : $r[1] }

# Wait until the model behind $prefix (default /v1) answers /health with 200, i.e. its
# scheduler process has loaded it. Dies (the block's init fails) after $secs.
sub wait_ready {
    my ($prefix, $secs) = @_;
    $prefix //= '/v1';
    my $deadline = Time::HiRes::time() + ($secs || 60);
    my ($st, $b) = (0, '');
    while (Time::HiRes::time() < $deadline) {
        ($st, $b) = http_request('GET', "$prefix/health");
        return 1 if $st == 200;
        Time::HiRes::sleep(0.05);
    }
    die "the model behind $prefix is not ready after ${\ ($secs || 60)} s: /health says $st $b\n";
}

# Wait until $prefix/get_model_info (default /v1) reports the model's status $want (a
# string or a qr//: "failed" once its scheduler gave up on the model, "ready", ...).
# Dies after $secs (30).
sub wait_model_status {
    my ($want, $prefix, $secs) = @_;
    $prefix //= '/v1';
    my $re = ref $want ? qr/"status":"(?:$want)"/ : qr/"status":"\Q$want\E"/;
    my $deadline = Time::HiRes::time() + ($secs || 30);
    my $b = '';
    while (Time::HiRes::time() < $deadline) {
        (undef, $b) = http_request('GET', "$prefix/get_model_info");
        return 1 if $b =~ $re;
        Time::HiRes::sleep(0.05);
    }
    die "the model behind $prefix is not \"$want\" after ${\ ($secs || 30)} s: $b\n";
}

# Wait until the scheduler of $model has given up on loading it (the log says why) and
# the channel says so (failed, or down until the supervisor's next try).
sub wait_scheduler_failed {
    my ($model, $prefix) = @_;
    wait_log(qr/srt: scheduler for model "\Q$model\E" failed/, 30)
        or die "the scheduler of \"$model\" did not fail\n";
    wait_model_status(qr/failed|down/, $prefix);
}

sub log_file { servroot() . '/logs/error.log' }

# The error log of the running nginx, as one string.
sub error_log {
    open my $fh, '<', log_file() or return '';
    local $/;
    return <$fh> // '';
}

# Wait up to $secs for the error log to match $re; true when it did.
sub wait_log {
    my ($re, $secs) = @_;
    my $deadline = Time::HiRes::time() + ($secs || 10);
    while (1) {
        return 1 if error_log() =~ $re;
        return 0 if Time::HiRes::time() > $deadline;
        Time::HiRes::sleep(0.05);
    }
}

# How many lines of the error log match $re.
sub count_log {
    my ($re) = @_;
    return scalar grep { $_ =~ $re } split /^/m, error_log();
}

# The pid of the scheduler process that owns the model now (the newest owner in the log).
sub scheduler_pid {
    my ($model) = @_;
    my $pat = defined $model ? qr/srt: scheduler process (\d+) owns model "\Q$model\E"/
                             : qr/srt: scheduler process (\d+) owns model/;
    my @pids = error_log() =~ /$pat/g;
    return $pids[-1];
}

# Whether process $pid runs (a zombie does not: an exited daemon's children are
# re-parented to init, which may take a second or more to reap them).
sub alive {
    my ($pid) = @_;
    return 0 unless $pid && kill 0, $pid;
    open my $fh, '<', "/proc/$pid/stat" or return 1;
    return (<$fh> // '') !~ /^\d+ \(.*\) [ZX] /s;
}

sub master_pid {
    open my $fh, '<', servroot() . '/logs/nginx.pid' or return undef;
    my $pid = <$fh> // '';
    chomp $pid;
    return $pid =~ /^\d+$/ ? $pid : undef;
}

# Children of the nginx master whose title matches $re ("worker process",
# "cache manager process": the srt helper that supervises the scheduler processes).
sub child_pids {
    my ($re) = @_;
    my $master = master_pid() or return ();
    return grep { /^\d+$/ } map { (split ' ')[0] } grep { $_ =~ $re }
           `ps -o pid=,args= --ppid $master`;
}

# Fork a process that kills the current scheduler with SIGKILL $secs after a request
# runs (as $prefix/health, default /v1, shows); returns its pid.
sub kill_scheduler_after {
    my ($secs, $prefix) = @_;
    $prefix //= '/v1';
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    return $pid if $pid;
    for (1 .. 3000) {
        last if http_get("$prefix/health") =~ /"running":[1-9]/;
        Time::HiRes::sleep(0.01);
    }
    Time::HiRes::sleep($secs);
    my $sched = scheduler_pid();
    kill 'KILL', $sched if $sched;
    POSIX::_exit(0);
}

# Start one background client per request body; each writes the raw response to
# "$dir/$name-$i". Returns their pids (wait for them with wait_clients).
sub start_clients {
    my ($dir, $name, $uri, @bodies) = @_;
    my @pids;
    my $i = 0;
    for my $body (@bodies) {
        $i++;
        unlink "$dir/$name-$i";
        my $pid = fork();
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            my (undef, undef, $raw) = http_request('POST', $uri, $body);
            if (open my $fh, '>', "$dir/$name-$i.tmp") {
                print $fh $raw;
                close $fh;
                rename "$dir/$name-$i.tmp", "$dir/$name-$i";
            }
            POSIX::_exit(0);
        }
        push @pids, $pid;
    }
    return @pids;
}

# Wait for background clients; returns their raw responses in order.
sub wait_clients {
    my ($dir, $name, @pids) = @_;
    waitpid($_, 0) for @pids;
    my @out;
    for my $i (1 .. @pids) {
        open my $fh, '<', "$dir/$name-$i" or do { push @out, ''; next };
        local $/;
        push @out, <$fh> // '';
    }
    return @out;
}

# Send a POST and hang up: once $until (a regex) matches what came back, or after $secs.
# Returns what was received.
sub abort_after {
    my ($uri, $body, $secs, $until) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => port(), Timeout => 10)
        or die "connect: $!";
    print $s "POST $uri HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n"
           . "Content-Length: " . length($body) . "\r\n\r\n$body";
    my $got = '';
    my $deadline = Time::HiRes::time() + $secs;
    my $sel = IO::Select->new($s);
    while ((my $left = $deadline - Time::HiRes::time()) > 0) {
        last if defined $until && $got =~ $until;
        last unless $sel->can_read($left);
        last unless sysread($s, my $buf, 65536);
        $got .= $buf;
    }
    close $s;
    return $got;
}

# Turn "ok NAME" / "not ok NAME" lines (a helper script's own checks) into assertions;
# returns how many there were.
sub tap_lines {
    my ($prefix, @lines) = @_;
    my $n = 0;
    for (@lines) {
        chomp;
        if (/^ok (.*)/) { Test::More::pass("$prefix: $1"); $n++ }
        elsif (/^not ok (.*)/) { Test::More::fail("$prefix: $1"); $n++ }
    }
    return $n;
}

# Once the model behind /v1 is ready, run a client script of t/lib (python3) with @args, in
# which {base} stands for the test server's http://127.0.0.1:PORT; it must exit 0 and report
# exactly $want checks as "ok"/"not ok" lines, each an assertion named "$label: ...".
#   client_checks('openai', 14, 'openai_e2e.py', '{base}/v1', 'smollm2');
sub client_checks {
    my ($label, $want, $script, @args) = @_;
    wait_ready();
    my $base = 'http://127.0.0.1:' . port();
    s/\{base\}/$base/g for @args;
    my @lines = `python3 $Root/t/lib/$script @args 2>&1`;
    Test::More::is($?, 0, "$script ran") or Test::More::diag(join '', @lines);
    my $n = tap_lines($label, @lines);
    Test::More::ok($n == $want, "$label: all checks reported ($n)");
    return $n;
}

# A second nginx with its own prefix and port, for tests that start, signal and stop it
# themselves:
#   my $ngx = private_nginx("stop-quit", $port, $location_body);
#   my $ngx = private_nginx($name, $port, $location_body, user => 'nobody');  # a root master's workers
#   $ngx->start; $ngx->log; $ngx->signal('reload'); $ngx->write($new_body); $ngx->stop;
sub private_nginx {
    my ($name, $port, $location, %opt) = @_;
    # more: further locations of the same server, as nginx.conf text
    my $self = bless { prefix => srt_dir($name), port => $port, user => $opt{user},
                       more => $opt{more} // '' }, 'Test::Srt::Nginx';
    system("rm -rf '$self->{prefix}'");
    File::Path::make_path("$self->{prefix}/conf", "$self->{prefix}/logs");
    $self->write($location);
    return $self;
}

package Test::Srt::Nginx;

sub bin { $ENV{TEST_NGINX_BINARY} || 'nginx' }

sub write {
    my ($self, $location) = @_;
    my $p = $self->{prefix};
    open my $fh, '>', "$p/conf/nginx.conf" or die "$p/conf/nginx.conf: $!";
    # the workers' user as both harnesses give their own nginx: TEST_NGINX_WORKER_USER,
    # else root when started as root
    my $u = $self->{user} // $ENV{TEST_NGINX_WORKER_USER};
    my $user = defined $u && length $u ? "user $u;" : $> == 0 ? 'user root;' : '';
    print $fh <<"CONF";
load_module $ENV{TEST_NGINX_SRT_MODULE};
$user
master_process on;
daemon on;
worker_processes 1;
pid $p/logs/nginx.pid;
error_log $p/logs/error.log info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $p/client_body_temp;
    proxy_temp_path $p/proxy_temp;
    fastcgi_temp_path $p/fastcgi_temp;
    uwsgi_temp_path $p/uwsgi_temp;
    scgi_temp_path $p/scgi_temp;
    server {
        listen 127.0.0.1:$self->{port};
        location /v1/ { $location }
$self->{more}
    }
}
CONF
    close $fh;
}

sub start { my $self = shift; system(bin(), '-p', "$self->{prefix}/", '-c', 'conf/nginx.conf') == 0 }
sub signal { my ($self, $sig) = @_; system(bin(), '-p', "$self->{prefix}/", '-c', 'conf/nginx.conf', '-s', $sig) }
sub stop { $_[0]->signal('stop') }

sub log {
    my $self = shift;
    open my $fh, '<', "$self->{prefix}/logs/error.log" or return '';
    local $/;
    return <$fh> // '';
}

# Wait up to $secs (120) for $prefix/health (default /v1) on this nginx's port to answer 200,
# i.e. its scheduler has loaded the model; true when it did.
sub wait_up {
    my ($self, $prefix, $secs) = @_;
    $prefix //= '/v1';
    for (1 .. ($secs || 120) * 10) {
        my ($st) = Test::Srt::http_request('GET', "$prefix/health", undef, {}, $self->{port});
        return 1 if $st == 200;
        Time::HiRes::sleep(0.1);
    }
    return 0;
}

# Wait up to $secs for the log to match $re; true when it did.
sub wait_log {
    my ($self, $re, $secs) = @_;
    for (1 .. ($secs || 20) * 20) {
        return 1 if $self->log =~ $re;
        Time::HiRes::sleep(0.05);
    }
    return 0;
}

1;
