package Test::Nginx::Socket;

# A small harness for Test::Nginx's data-driven .t format (openresty/test-nginx).
#
# The suites under t/ say `use Test::Nginx::Socket 'no_plan';` and run unchanged under
# either this file (prove -I t/lib, as scripts/run-tests.sh does) or the real
# Test::Nginx::Socket from CPAN (prove without -I t/lib). Only what our suites use is
# implemented, with the real module's semantics (checked against its source; see
# t/README.md for the list and for what differs on purpose):
#   - blocks run in a random order (no_shuffle() or TEST_NGINX_NO_SHUFFLE=1 to keep file
#     order) and nginx is started afresh for every block, so a block never sees run-time
#     state (scheduler, hooks removed through srt_admin, counters) left by an earlier one;
#     `--- init` runs once per block after that start;
#   - TEST_NGINX_FORCE_RESTART_ON_TEST=0 keeps nginx across blocks whose `--- config` is
#     the same (all the real module compares); use_hup() or TEST_NGINX_USE_HUP=1 turns a
#     restart of a running nginx into USR1 + HUP;
#   - the error log checks read the log from its start for each block, then from where the
#     previous request's check stopped, and match each pattern line by line;
#   - section values keep their trailing newline: `--- response_body_like chomp` for a
#     pattern that is not at the body's end.
# A block that needs state builds it itself, in its `--- init` (helpers in Test::Srt) or
# with `--- request eval [...]`: the requests go in order, one connection each, and
# error_code / response_body / response_body_like / response_headers must then be arrays
# indexed by request.

use strict;
use warnings;

use Test::More ();
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(sleep time);
use File::Path qw(make_path remove_tree);
use Cwd qw(cwd);
use POSIX ();
use List::Util ();

our $VERSION = '0.1';

our $ServerPort = $ENV{TEST_NGINX_PORT} || 1984;
our $ServerPortForClient = $ServerPort;
our $ServerRoot = $ENV{TEST_NGINX_SERVROOT} || cwd() . '/t/servroot';
$ServerRoot =~ s{/+$}{};
our $NginxBinary = $ENV{TEST_NGINX_BINARY} || 'nginx';
our $RepeatEach = 1;
our $MasterProcessEnabled = 'off';
our $DaemonEnabled = 'on';
our $Workers = 1;
our $WorkerConnections = 64;
our $LogLevel = 'debug';
our $NoRootLocation = 0;
our @BlockPreprocessors;
# Like the real module, blocks run in a random order unless no_shuffle() or
# TEST_NGINX_NO_SHUFFLE=1: a block must not depend on what an earlier one did.
our $NoShuffle = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;

# Like the real module: nginx is started afresh for every block unless
# TEST_NGINX_FORCE_RESTART_ON_TEST=0, which keeps it across blocks whose generated
# configuration is identical; with use_hup() or TEST_NGINX_USE_HUP=1 a "restart" of a
# running nginx is a log reopen (USR1) plus a reload (HUP), with master_process on.
our $UseHup = $ENV{TEST_NGINX_USE_HUP};
our $ForceRestartOnTest = defined $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST}
                        ? $ENV{TEST_NGINX_FORCE_RESTART_ON_TEST} : 1;

my $Plan;
my $NginxPid;
my $RunningConf = '';
my $PrevConf;

sub import {
    my ($class, @args) = @_;
    my $caller = caller;

    no strict 'refs';
    for my $name (qw(run_tests repeat_each master_on master_off workers
                     worker_connections log_level no_shuffle no_long_string
                     no_root_location add_block_preprocessor blocks
                     env_to_nginx html_dir server_root server_port
                     server_port_for_client use_hup timeout
                     master_process_enabled plan is ok like unlike is_deeply
                     diag note pass fail done_testing)) {
        my $src = defined &{"Test::Nginx::Socket::$name"}
                ? \&{"Test::Nginx::Socket::$name"} : \&{"Test::More::$name"};
        *{"${caller}::$name"} = $src;
    }
    *{"${caller}::ServerPort"} = \$ServerPort;
    *{"${caller}::ServerPortForClient"} = \$ServerPortForClient;
    *{"${caller}::ServerRoot"} = \$ServerRoot;

    if (@args && $args[0] eq 'no_plan') {
        $Plan = 'no_plan';
        Test::More::plan('no_plan');
    } elsif (@args && $args[0] eq 'tests') {
        Test::More::plan(tests => $args[1]);
        $Plan = 'tests';
    }
}

sub plan { $Plan = 1; Test::More::plan(@_) }
sub repeat_each { $RepeatEach = shift if @_; $RepeatEach }
sub master_on { $MasterProcessEnabled = 'on' }
sub master_off { $MasterProcessEnabled = 'off' }
sub master_process_enabled { $MasterProcessEnabled = $_[0] ? 'on' : 'off' if @_; $MasterProcessEnabled eq 'on' }
sub workers { $Workers = shift }
sub worker_connections { $WorkerConnections = shift }
sub log_level { $LogLevel = shift }
sub no_shuffle { $NoShuffle = 1 }
sub no_long_string { }
sub no_root_location { $NoRootLocation = 1 }
sub env_to_nginx { }
sub html_dir { "$ServerRoot/html" }
sub server_root { $ServerRoot }
sub server_port { $ServerPort }
sub server_port_for_client { $ServerPortForClient }
sub use_hup { $UseHup = 1 }
sub timeout { }
sub add_block_preprocessor { push @BlockPreprocessors, shift }

# ---- blocks ----

package Test::Nginx::Socket::Block;

our $AUTOLOAD;

sub new { my ($class, %a) = @_; bless { %a, _sections => {} }, $class }
sub name { $_[0]{name} }
sub set_value { my ($self, $k, $v) = @_; $self->{_sections}{$k} = $v }
sub has { exists $_[0]{_sections}{$_[1]} }

sub AUTOLOAD {
    my $self = shift;
    (my $name = $AUTOLOAD) =~ s/.*:://;
    return if $name eq 'DESTROY';
    my $v = $self->{_sections}{$name};
    return wantarray && ref $v eq 'ARRAY' ? @$v : $v;
}

package Test::Nginx::Socket;

my @Blocks;

sub apply_filters {
    my ($value, $filters, $inline) = @_;

    $value =~ s/\r\n/\n/g;
    unless ($inline) {
        # Test::Base's default filters: drop leading blank lines, one trailing newline
        $value =~ s/\A(\s*\n)+//;
        $value =~ s/\n\s*\z/\n/;
    }

    for my $f (@$filters) {
        if ($f eq 'eval') {
            my @r = eval "package main; no strict; $value";
            die "eval filter failed: $@" if $@;
            $value = @r == 1 ? $r[0] : \@r;
        } elsif ($f eq 'chomp') {
            chomp $value unless ref $value;
        } elsif ($f eq 'chop') {
            chop $value unless ref $value;
        } elsif ($f eq 'json') {
        } else {
            # unknown filters are ignored, as they only reshape text
        }
    }

    return $value;
}

sub read_blocks {
    my $text = do { local $/; <main::DATA> };
    return () unless defined $text;

    $text =~ s/^__END__\n.*//ms;

    my @raw = split /^=== /m, $text;
    shift @raw;

    my @blocks;
    for my $raw (@raw) {
        my ($title, $rest) = split /\n/, $raw, 2;
        $rest //= '';
        my $block = Test::Nginx::Socket::Block->new(name => $title);
        my @parts = split /^--- /m, "\n$rest";
        shift @parts;
        for my $part (@parts) {
            my ($head, $body) = split /\n/, $part, 2;
            $body //= '';
            my ($name, $inline, @filters);
            if ($head =~ /^(\w+)\s*:\s*(.*)$/) {
                ($name, $inline) = ($1, $2);
                $inline =~ s/\s+$//;
                $block->set_value($name, $inline);
                next;
            }
            ($name, @filters) = split /\s+/, $head;
            $block->set_value($name, apply_filters($body, \@filters, 0));
        }
        push @blocks, $block;
    }

    my @only = grep { $_->has('ONLY') } @blocks;
    @blocks = @only if @only;
    my @kept;
    for my $b (@blocks) {
        next if $b->has('SKIP');
        push @kept, $b;
        last if $b->has('LAST');
    }
    return @kept;
}

sub blocks { @Blocks = read_blocks() unless @Blocks; @Blocks }

# ---- nginx ----

sub expand_env {
    my ($s, $where) = @_;
    return $s unless defined $s && !ref $s;
    $s =~ s{\$(TEST_NGINX_[_A-Z0-9]+)}{
        my $v = $1 eq 'TEST_NGINX_SERVER_PORT' ? $ServerPort
              : $1 eq 'TEST_NGINX_SERVER_ROOT' ? $ServerRoot
              : $ENV{$1};
        die "environment variable \$$1 used in $where is not defined\n" unless defined $v;
        $v
    }ge;
    return $s;
}

sub nginx_conf {
    my ($block) = @_;
    my $main = expand_env($block->main_config // '', 'main_config');
    my $http = expand_env($block->http_config // '', 'http_config');
    my $config = expand_env($block->config // '', 'config');
    my $post = expand_env($block->post_main_config // '', 'post_main_config');
    my $root = $NoRootLocation ? '' : "        location / { root $ServerRoot/html; index index.html; }\n";
    $root = '' if $config =~ /location\s+\/\s*\{/;

    return <<"EOF";
daemon $DaemonEnabled;
master_process $MasterProcessEnabled;
worker_processes $Workers;
pid $ServerRoot/logs/nginx.pid;
error_log $ServerRoot/logs/error.log $LogLevel;
$main
events {
    accept_mutex off;
    worker_connections $WorkerConnections;
}
http {
    access_log $ServerRoot/logs/access.log;
    default_type text/plain;
    keepalive_timeout 68;
    client_body_temp_path $ServerRoot/client_body_temp;
    proxy_temp_path $ServerRoot/proxy_temp;
    fastcgi_temp_path $ServerRoot/fastcgi_temp;
    uwsgi_temp_path $ServerRoot/uwsgi_temp;
    scgi_temp_path $ServerRoot/scgi_temp;
$http
    server {
        listen $ServerPort;
        server_name localhost;
        client_max_body_size 30M;
$config
$root    }
}
$post
${\ worker_user_directive()}
EOF
}

# As openresty's Test::Nginx: TEST_NGINX_WORKER_USER names the user of the workers (and so
# of the srt scheduler) when nginx starts as root (scripts/run-tests.sh sets it, see
# scripts/srt-user.sh); without it, a root run keeps root, as there.
sub worker_user_directive {
    my $u = $ENV{TEST_NGINX_WORKER_USER};
    if (defined $u && length $u) {
        die "TEST_NGINX_WORKER_USER: bad user name '$u'\n" unless $u =~ /^\w[-\w]+(?:\s+\w[-\w]+)?$/;
        return "user $u;";
    }
    return $> == 0 ? 'user root;' : '';
}

sub read_pid {
    open my $fh, '<', "$ServerRoot/logs/nginx.pid" or return undef;
    my $pid = <$fh>;
    close $fh;
    chomp $pid if defined $pid;
    return $pid && $pid =~ /^\d+$/ ? $pid : undef;
}

# Like kill(0, pid), but a zombie is not running: a daemonised nginx is reparented to
# init, which may take a while to reap it (seconds in some containers).
sub is_running {
    my ($pid) = @_;
    return 0 unless $pid && kill 0, $pid;
    if (open my $fh, '<', "/proc/$pid/stat") {
        my $stat = <$fh> // '';
        return 0 if $stat =~ /^\d+ \(.*\) [ZX] /s;
    }
    return 1;
}

# TERM (the real module sends QUIT unless TEST_NGINX_FAST_SHUTDOWN; QUIT would wait for
# the long requests some blocks leave running), then KILL the group after 3 s like it.
sub stop_nginx {
    my $pid = $NginxPid // read_pid();
    $RunningConf = '';
    $NginxPid = undef;
    return unless is_running($pid);
    kill 'TERM', $pid;
    for (1 .. 60) {
        last unless is_running($pid);
        waitpid($pid, POSIX::WNOHANG());
        sleep 0.05;
    }
    if (is_running($pid)) {
        # the daemonised master leads its own process group: take its children too
        kill 'KILL', -$pid;
        kill 'KILL', $pid;
        sleep 0.1;
    }
    # the next nginx binds the same port: wait until no process of this one holds it
    for (1 .. 100) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $ServerPort,
                                      Proto => 'tcp', Timeout => 1) or last;
        close $s;
        sleep 0.05;
    }
}

# As the real module: remove conf, logs, html, cache and the *_temp/*_cache dirs, then
# the server root itself, which must then be empty (it bails out otherwise).
sub clean_servroot {
    if (-d $ServerRoot) {
        remove_tree("$ServerRoot/$_") for qw(conf logs html cache);
        remove_tree($_) for glob("$ServerRoot/*_temp"), glob("$ServerRoot/*_cache");
        rmdir $ServerRoot
            or Test::More::BAIL_OUT("Can't remove $ServerRoot (not empty?): $!");
    }
    make_path("$ServerRoot/$_") for qw(conf logs html);
}

sub run_cmd {
    my (@cmd) = @_;
    my $out = "$ServerRoot/logs/nginx.out";
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDOUT, '>', $out or POSIX::_exit(127);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(127);
        exec @cmd or POSIX::_exit(127);
    }
    waitpid($pid, 0);
    my $rc = $? >> 8;
    open my $fh, '<', $out;
    local $/;
    my $text = <$fh> // '';
    return ($rc, $text);
}

sub wait_port {
    my $deadline = time + 10;
    while (time < $deadline) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $ServerPort,
                                      Proto => 'tcp', Timeout => 1);
        if ($s) { close $s; return 1 }
        sleep 0.02;
    }
    return 0;
}

sub start_nginx {
    my ($block, $conf) = @_;
    stop_nginx();
    clean_servroot();
    open my $fh, '>', "$ServerRoot/conf/nginx.conf" or die "$ServerRoot/conf/nginx.conf: $!";
    print $fh $conf;
    close $fh;
    if (my $files = $block->user_files) {
        write_user_files($files);
    }
    my ($rc, $out) = run_cmd($NginxBinary, '-e', "$ServerRoot/logs/error.log",
                             '-p', "$ServerRoot/", '-c', 'conf/nginx.conf');
    return ($rc, $out . log_since(0)) if $rc != 0;
    for (1 .. 200) { last if read_pid(); sleep 0.02 }
    $NginxPid = read_pid();
    wait_port();
    $RunningConf = $conf;
    return (0, $out);
}

# Reload a running nginx for the next block: fresh logs and html, new conf, USR1, HUP.
sub hup_nginx {
    my ($block, $conf) = @_;
    my $pid = $NginxPid // read_pid();
    for my $d (glob("$ServerRoot/*_temp"), glob("$ServerRoot/*_cache")) { remove_tree($d) }
    for my $d (qw(conf html)) { remove_tree("$ServerRoot/$d") }
    unlink glob("$ServerRoot/logs/*.log");
    make_path("$ServerRoot/$_") for qw(conf logs html);
    open my $fh, '>', "$ServerRoot/conf/nginx.conf" or die "$ServerRoot/conf/nginx.conf: $!";
    print $fh $conf;
    close $fh;
    if (my $files = $block->user_files) {
        write_user_files($files);
    }
    kill 'USR1', $pid;
    sleep 0.015;
    kill 'HUP', $pid;
    # wait until the master has read the new configuration and started new workers
    my $deadline = time + 10;
    while (time < $deadline) {
        my $log = log_since(0);
        # with master_process off nginx reconfigures in place: no new worker
        last if $log =~ /reconfiguring/
                && ($MasterProcessEnabled ne 'on' || $log =~ /start worker process/);
        last if $log =~ /\[emerg\]/;
        sleep 0.02;
    }
    sleep 0.05;
    $RunningConf = $conf;
}

sub write_user_files {
    my ($spec) = @_;
    my @files = ref $spec eq 'ARRAY' ? @$spec : ();
    unless (@files) {
        my @chunks = split /^>>> /m, $spec;
        shift @chunks;
        for my $c (@chunks) {
            my ($name, $body) = split /\n/, $c, 2;
            push @files, [$name, $body // ''];
        }
    }
    for my $f (@files) {
        my $path = "$ServerRoot/html/$f->[0]";
        (my $dir = $path) =~ s{/[^/]*$}{};
        make_path($dir);
        open my $fh, '>', $path or die "$path: $!";
        print $fh $f->[1];
        close $fh;
    }
}

sub log_size { -s "$ServerRoot/logs/error.log" || 0 }

sub log_since {
    my ($pos) = @_;
    open my $fh, '<', "$ServerRoot/logs/error.log" or return '';
    seek $fh, $pos, 0;
    local $/;
    my $text = <$fh> // '';
    close $fh;
    return $text;
}

# ---- HTTP ----

sub build_request {
    my ($block, $one) = @_;
    if (!defined $one && defined $block->raw_request) {
        my $raw = $block->raw_request;
        return ref $raw eq 'ARRAY' ? join('', @$raw) : expand_env($raw, 'raw_request');
    }
    my $req = expand_env(defined $one ? $one : $block->request, 'request');
    die "no --- request\n" unless defined $req;
    # the real module drops leading blank and comment lines
    while ($req =~ s/^\s*\#[^\n]+\s+|^\s+//gs) { }
    my ($line, $body) = split /\n/, $req, 2;
    $line =~ s/^\s+|\s+$//g;
    my ($method, $uri, $proto) = split /\s+/, $line;
    $proto ||= 'HTTP/1.1';
    my $headers = "Host: localhost\r\nConnection: close\r\n";
    my %set;
    if (defined(my $more = $block->more_headers)) {
        $more = expand_env($more, 'more_headers');
        for my $h (split /\n/, $more) {
            next unless $h =~ /\S/;
            my ($k) = $h =~ /^([^:]+):/;
            $set{lc $k} = 1 if $k;
            $headers =~ s/^\Q$k\E:[^\n]*\r\n//im if $k && $k =~ /^(Host|Connection)$/i;
            $headers .= "$h\r\n";
        }
    }
    # like the real module: the body is trimmed, and an empty one gets no Content-Length
    $body =~ s/^\s+|\s+$//gs if defined $body;
    if (defined $body && length $body) {
        $headers .= "Content-Length: " . length($body) . "\r\n" unless $set{'content-length'} || $set{'transfer-encoding'};
    } else {
        $body = '';
    }
    return "$method $uri $proto\r\n$headers\r\n$body";
}

sub send_request {
    my ($raw, $timeout, $abort) = @_;
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $ServerPort,
                                     Proto => 'tcp', Timeout => $timeout)
        or return (undef, "cannot connect: $!");
    binmode $sock;
    $sock->autoflush(1);
    print $sock $raw;
    my $sel = IO::Select->new($sock);
    my $resp = '';
    my $timed_out = 0;
    # as in the real module, `--- timeout` bounds each wait for data, not the whole
    # response: a stream that keeps sending is read to its end
    while (1) {
        if (!$sel->can_read($timeout)) { $timed_out = 1; last }
        my $n = sysread($sock, my $buf, 65536);
        last unless $n;
        $resp .= $buf;
    }
    close $sock;
    return ($resp, $timed_out ? 'timeout' : undef);
}

sub parse_response {
    my ($resp) = @_;
    my ($head, $body) = split /\r\n\r\n/, $resp, 2;
    return (undef, {}, '') unless defined $head && $head =~ m{^HTTP/\d\.\d (\d+)};
    my $status = $1;
    my %h;
    for my $line (split /\r\n/, $head) {
        next unless $line =~ /^([^:]+):\s*(.*)$/;
        $h{lc $1} = defined $h{lc $1} ? "$h{lc $1}, $2" : $2;
    }
    $body //= '';
    if (($h{'transfer-encoding'} // '') =~ /chunked/i) {
        my $out = '';
        my $complete = 0;
        while ($body =~ s/\A([0-9a-fA-F]+)[^\r\n]*\r\n//) {
            my $len = hex $1;
            if ($len == 0) { $complete = 1; last }
            last if length($body) < $len + 2;
            $out .= substr($body, 0, $len);
            substr($body, 0, $len + 2) = '';
        }
        # the real module fails a chunked body without its last chunk
        return ('truncated', \%h, $out) unless $complete;
        $body = $out;
    }
    return ($status, \%h, $body);
}

# ---- the tests ----

# Like the real module: each pattern (a line of the section, or a qr// from eval) is
# matched against the error log one line at a time; the log is read from the block's
# start (a restart leaves a fresh one) or from where the previous request's check ended.
sub log_lines {
    my ($text) = @_;
    return [ split /^/m, $text ];
}

sub section_patterns {
    my ($want) = @_;
    return ref $want eq 'ARRAY' ? grep { defined } @$want
         : ref $want eq 'Regexp' ? ($want)
         : grep { length } split /\n+/, $want;
}

sub line_hit {
    my ($line, $p) = @_;
    return ref $p eq 'Regexp' ? $line =~ $p : index($line, $p) >= 0;
}

sub check_log_patterns {
    my ($block, $log, $name) = @_;
    my $lines = log_lines($log);

    if (defined(my $grep = $block->{_sections}{grep_error_log})) {
        my $want = $block->{_sections}{grep_error_log_out};
        Test::More::BAIL_OUT("$name - No --- grep_error_log_out defined but --- grep_error_log is defined")
            unless defined $want;
        $grep = $grep->[0] if ref $grep eq 'ARRAY';
        $want = $want->[0] if ref $want eq 'ARRAY';
        my $got = '';
        for my $line (@$lines) {
            if (ref $grep ? $line =~ $grep : $line =~ /\Q$grep\E/) {
                my $m = $&;
                $got .= "$m\n" unless $m =~ /\n/;
            }
        }
        if (ref $want eq 'Regexp') {
            Test::More::like($got, $want, "$name - grep_error_log_out");
        } else {
            Test::More::is($got, $want, "$name - grep_error_log_out");
        }
    }

    if (defined(my $want = $block->{_sections}{error_log})) {
        for my $p (section_patterns($want)) {
            my $hit = grep { line_hit($_, $p) } @$lines;
            Test::More::ok($hit, "$name - pattern \"$p\" should match a line in error.log")
                or Test::More::diag("log was:\n" . substr($log, -2000));
        }
    }

    if (defined(my $want = $block->{_sections}{no_error_log})) {
        for my $p (section_patterns($want)) {
            my ($line) = grep { line_hit($_, $p) } @$lines;
            Test::More::ok(!defined $line, "$name - pattern \"$p\" should not match any line in error.log")
                or Test::More::diag("it matches: $line");
        }
    }
}

# Sections this harness implements; any other one fails the suite rather than being
# ignored (the real module would check it).
my %Known = map { $_ => 1 } qw(main_config http_config config post_main_config log_level
    request raw_request more_headers timeout abort wait init user_files ignore_response
    error_code response_body response_body_like response_body_unlike response_headers
    response_headers_like error_log no_error_log grep_error_log grep_error_log_out
    must_die ONLY SKIP LAST);

sub run_block {
    my ($block) = @_;
    my $name = $block->name;

    $_->($block) for @BlockPreprocessors;

    for my $sec (sort keys %{ $block->{_sections} }) {
        Test::More::BAIL_OUT("$name: section --- $sec is not supported by t/lib's harness")
            unless $Known{$sec};
    }
    local $LogLevel = $block->log_level // $LogLevel;

    my $conf = eval { nginx_conf($block) };
    if ($@) { Test::More::BAIL_OUT("$name: $@") }

    my $timeout = $block->timeout // $ENV{TEST_NGINX_TIMEOUT} // 3;
    $timeout =~ s/s$//;

    if (defined $block->must_die) {
        # like the real module: start nginx for real (startup errors go to
        # logs/error.log through -e) and expect it to fail; only the log is checked
        stop_nginx();
        clean_servroot();
        open my $fh, '>', "$ServerRoot/conf/nginx.conf" or die $!;
        print $fh $conf;
        close $fh;
        my ($rc, $out) = run_cmd($NginxBinary, '-e', "$ServerRoot/logs/error.log",
                                 '-p', "$ServerRoot/", '-c', 'conf/nginx.conf');
        Test::More::ok($rc != 0, "$name - die as expected") or Test::More::diag($out);
        if ($rc == 0) {
            for (1 .. 50) { last if read_pid(); sleep 0.02 }
            $NginxPid = read_pid();
            stop_nginx();
        }
        check_log_patterns($block, log_since(0), $name);
        return;
    }

    # Restart unless TEST_NGINX_FORCE_RESTART_ON_TEST=0 and the block's `--- config`
    # (all the real module compares) is the same as the previous block's.
    my $config = expand_env($block->config // '', 'config');
    my $running = is_running($NginxPid);
    my $restart = !defined $PrevConf || $config ne $PrevConf || $ForceRestartOnTest
                  || !$running;
    $PrevConf = $config;
    if ($restart && $UseHup && $running) {
        hup_nginx($block, $conf);
    } elsif ($restart) {
        my ($rc, $out) = start_nginx($block, $conf);
        if ($rc != 0) {
            Test::More::fail("$name - nginx failed to start: $out");
            return;
        }
    }

    if (my $code = $block->init) {
        # the real module evals init once per block, inside Test::Nginx::Util, under
        # strict: a suite's own subs and globals are reached as main::name (or after
        # `package main;`)
        eval "package Test::Nginx::Util; use strict; $code";
        Test::More::BAIL_OUT("$name - init failed: $@") if $@;
    }

    # the real module reads the error log from its start for each block (a fresh log
    # after a restart), then from where the previous check stopped
    my $pos = 0;

    for my $rep (1 .. $RepeatEach) {
        my $rname = $name . ($RepeatEach > 1 ? " (repeat $rep)" : '');
        $pos = run_requests($block, $rname, $timeout, $pos);
    }
}

sub run_requests {
    my ($block, $name, $timeout, $pos) = @_;

    # `--- request eval [...]`: several requests in order, each on its own connection;
    # every expectation must then be an array indexed by request
    my @reqs = ref $block->{_sections}{request} eq 'ARRAY'
             ? @{ $block->{_sections}{request} } : (undef);
    my $need_array = @reqs > 1;
    my $check_log = grep { defined $block->{_sections}{$_} } qw(error_log no_error_log grep_error_log);

    for my $i (0 .. $#reqs) {
        my $rname = $need_array ? "$name (req $i)" : $name;
        my $raw = build_request($block, $reqs[$i]);
        my ($resp, $err) = send_request($raw, $timeout, $block->abort);

        if (!defined $resp) {
            Test::More::fail("$rname - request failed: " . ($err // 'no response'));
        } else {
            if ($err && $err eq 'timeout' && !defined $block->abort) {
                Test::More::fail("ERROR: client socket timed out - $rname");
            }
            check_response($block, $rname, $resp, $i, $need_array);
        }

        sleep $block->wait if $block->wait;
        # the real module gives the log a moment to catch up (log-phase lines)
        sleep 0.05 if $check_log;

        my $now = log_size();
        check_log_patterns($block, log_since($pos), $rname);
        $pos = $now;
    }
    return $pos;
}

sub indexed {
    my ($block, $sec, $i, $need_array, $name) = @_;
    my $v = $block->{_sections}{$sec};
    return $v unless defined $v;
    if ($need_array) {
        Test::More::BAIL_OUT("$name - You asked for many requests, the expected results should be arrays as well.")
            unless ref $v eq 'ARRAY';
        return $v->[$i];
    }
    return ref $v eq 'ARRAY' ? $v->[0] : $v;
}

sub check_response {
    my ($block, $name, $resp, $i, $need_array) = @_;
    return if defined $block->ignore_response;

    my ($status, $headers, $body) = parse_response($resp);

    # as in the real module, `--- abort` only silences the timeout: the status is still
    # checked (a block whose request is cut short says `--- ignore_response`)
    if (defined $status && $status eq 'truncated') {
        Test::More::fail("$name - no last chunk found in a chunked response");
        return;
    }
    my $code = indexed($block, 'error_code', $i, $need_array, $name) // 200;
    Test::More::is($status // '', $code, "$name - status code ok");

    if (defined(my $rh = indexed($block, 'response_headers', $i, $need_array, $name))) {
        for my $line (ref $rh eq 'ARRAY' ? @$rh : split /\n/, $rh) {
            next unless $line =~ /\S/;
            if ($line =~ /^!\s*([^:\s]+)\s*$/) {
                Test::More::ok(!defined $headers->{lc $1}, "$name - header $1 absent");
            } elsif ($line =~ /^([^:]+):\s*(.*)$/) {
                Test::More::is($headers->{lc $1} // '', $2, "$name - header $1 ok");
            }
        }
    }

    if (defined(my $rhl = $block->response_headers_like)) {
        # `--- response_headers_like eval` with one entry per request, or one for all
        $rhl = $rhl->[$i] if ref $rhl eq 'ARRAY';
        for my $line (split /\n/, $rhl // '') {
            next unless $line =~ /^([^:]+):\s*(.*)$/;
            Test::More::like($headers->{lc $1} // '', qr/$2/, "$name - header $1 like");
        }
    }

    if (defined(my $want = indexed($block, 'response_body', $i, $need_array, $name))) {
        Test::More::is($body, $want, "$name - response_body - response is expected");
    }

    if (defined(my $like = indexed($block, 'response_body_like', $i, $need_array, $name))) {
        # as in the real module the section is the pattern as is, its trailing newline
        # included: write `--- response_body_like chomp` for a pattern that is not at the
        # body's end
        my $re = ref $like eq 'Regexp' ? $like : qr/$like/s;
        Test::More::like($body, $re, "$name - response_body_like - response is expected");
    }

    if (defined(my $unlike = indexed($block, 'response_body_unlike', $i, $need_array, $name))) {
        my $re = ref $unlike eq 'Regexp' ? $unlike : qr/$unlike/s;
        Test::More::unlike($body, $re, "$name - response_body_unlike");
    }
}

sub run_tests {
    my @blocks = blocks();
    @blocks = List::Util::shuffle(@blocks) unless $NoShuffle;
    for my $block (@blocks) {
        run_block($block);
    }
    stop_nginx();
    Test::More::done_testing() unless $Plan;
}

END { stop_nginx() if $NginxPid }

1;

__END__

=head1 NAME

Test::Nginx::Socket (t/lib) - a small stand-in for openresty's Test::Nginx::Socket

=head1 DESCRIPTION

See t/README.md: what is supported, how to run a suite, and how to run the suites under
the real Test::Nginx.

=cut
