# ACL: users, passwords, command and key permissions, ACL LOG, the aclfile,
# and tenancy on the store and the data plane (acl.c).
#
# The tests without the mooncake tag are Redis 7 behaviour and pass against
# redis-server as well (./tests/runtest --server-binary /usr/bin/redis-server
# --single unit/acl): their errors are matched by the error word (NOPERM),
# since Redis 7.0 and 7.2 word the rest differently. The mooncake-tagged
# ones check what only this server has: @store, the data plane checked per
# object, SHM.ATTACH refused to tenants, tenant segments.

# sha256("p1"), as ACL GETUSER and ACL LIST show the password p1.
set ::p1hash f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a

# A new connection authenticated as user.
proc acl_client {user pass {unix 0}} {
    set c [expr {$unix ? [redis_client_unix] : [redis_client]}]
    $c auth $user $pass
    return $c
}

proc acl_log_field {entry field} { dict get $entry $field }

start_server {tags {acl}} {
    test {The default user: on, nopass, every key and command} {
        assert_equal default [r acl whoami]
        assert_equal {default} [r acl users]
        assert_equal {{user default on nopass ~* &* +@all}} [r acl list]
        set u [r acl getuser default]
        assert_equal {nopass on} [lsort [dict get $u flags]]
        assert_equal {} [dict get $u passwords]
        assert_equal +@all [dict get $u commands]
        assert_equal ~* [dict get $u keys]
    }

    test {A new user is off, with no password, no key and no command} {
        assert_equal OK [r acl setuser newbie]
        assert_equal {user newbie off resetchannels -@all} [lindex [r acl list] 1]
        set u [r acl getuser newbie]
        assert_equal off [dict get $u flags]
        assert_equal -@all [dict get $u commands]
        assert_equal {} [dict get $u keys]
        set c [redis_client]
        assert_error {WRONGPASS*} {$c auth newbie anything}
        $c close
        r acl deluser newbie
    } {1}

    test {AUTH user pass: the right password, a wrong one, an unknown user, a user that is off} {
        r acl setuser alice on >p1 ~* +@all
        set c [redis_client]
        assert_error {WRONGPASS*} {$c auth alice wrong}
        assert_error {WRONGPASS*} {$c auth nosuchuser p1}
        assert_equal OK [$c auth alice p1]
        assert_equal alice [$c acl whoami]
        r acl setuser alice off
        set d [redis_client]
        assert_error {WRONGPASS*} {$d auth alice p1}
        $d close
        $c close
        r acl setuser alice on
    } {OK}

    test {Passwords are stored as SHA-256: >pass shows its hash, #hash sets it, <pass and !hash remove it} {
        r acl setuser pw reset on >p1 +@all ~*
        assert_equal [list $::p1hash] [dict get [r acl getuser pw] passwords]
        assert_match "*#$::p1hash*" [lindex [r acl list] [lsearch [r acl users] pw]]
        r acl setuser pw <p1
        assert_equal {} [dict get [r acl getuser pw] passwords]
        r acl setuser pw #$::p1hash
        set c [redis_client]
        assert_equal OK [$c auth pw p1]
        $c close
        r acl setuser pw !$::p1hash
        set c [redis_client]
        assert_error {WRONGPASS*} {$c auth pw p1}
        $c close
        assert_error {ERR*password you are trying to remove*} {r acl setuser pw <p1}
        assert_error {ERR*hash must be exactly 64 characters*} {r acl setuser pw #abc}
        assert_error {ERR*hash must be exactly 64 characters*} {r acl setuser pw #[string toupper $::p1hash]}
    }

    test {A password is all its bytes: a zero byte is part of it} {
        r acl setuser bin reset on ">abc\x00def" +@all ~*
        set c [redis_client]
        assert_error {WRONGPASS*} {$c auth bin abc}
        assert_error {WRONGPASS*} {$c auth bin "abc\x00de"}
        assert_equal OK [$c auth bin "abc\x00def"]
        assert_equal bin [$c acl whoami]
        $c close
    }

    test {nopass accepts any password; resetpass forgets them all} {
        r acl setuser np reset on nopass +@all ~*
        set c [redis_client]
        assert_equal OK [$c auth np whatever]
        $c close
        r acl setuser np >p1 resetpass
        assert_equal {} [dict get [r acl getuser np] passwords]
        set c [redis_client]
        assert_error {WRONGPASS*} {$c auth np whatever}
        assert_error {WRONGPASS*} {$c auth np p1}
        $c close
    }

    test {SETUSER is all or nothing: a bad rule leaves the user as it was (or not created)} {
        assert_error {ERR*nosuchrule*} {r acl setuser ghost on >p1 +get nosuchrule}
        assert_equal {} [r acl getuser ghost]
        r acl setuser solid reset on >p1 +get ~s:*
        set before [r acl getuser solid]
        assert_error {ERR*} {r acl setuser solid >p2 -get +nosuchcommand}
        assert_error {ERR*} {r acl setuser solid +@nosuchcategory}
        assert_equal $before [r acl getuser solid]
        assert_error {ERR*Usernames can't contain spaces*} {r acl setuser "a b" on}
        # The empty name: refused (Redis 7.0 creates it, PROTOCOL.md), with
        # an error that says why -- it said "spaces or null characters".
        set users [r acl users]
        assert_error {ERR Usernames can't be empty} {r acl setuser "" on >p1}
        assert_equal $users [r acl users]
    }

    test {Adding a key pattern after allkeys is refused} {
        assert_error {ERR*Adding a pattern after the * pattern*} {r acl setuser kp allkeys ~foo}
        assert_equal OK [r acl setuser kp allkeys resetkeys ~foo]
        assert_equal ~foo [dict get [r acl getuser kp] keys]
        assert_equal OK [r acl setuser kp resetkeys %RW~*]
        assert_equal ~* [dict get [r acl getuser kp] keys]
    }

    # Both found by redis_diff.py's ACL mode once error texts were compared
    # to the letter; the texts are redis-server 7.0's.
    test {After allkeys even a malformed %... is refused for coming after it, as Redis} {
        r acl setuser kp2 reset allkeys
        foreach rule {% %X~a %R ~k*} {
            assert_error "ERR Error in ACL SETUSER modifier '$rule': Adding a pattern after the \* pattern*" \
                [list r acl setuser kp2 $rule]
        }
        assert_error "ERR Error in ACL SETUSER modifier '%': Syntax error" {r acl setuser kp3 reset %}
    }

    test {+cmd| with nothing after the bar: a syntax error, as Redis 7.0 (-cmd| an unknown name)} {
        assert_error "ERR Error in ACL SETUSER modifier '+get|': Syntax error" {r acl setuser sub1 +get|}
        assert_error "ERR Error in ACL SETUSER modifier '+config|': Syntax error" {r acl setuser sub1 +config|}
        assert_error "ERR Error in ACL SETUSER modifier '-get|': Unknown command or category name in ACL" \
            {r acl setuser sub1 -get|}
        assert_error "ERR Error in ACL SETUSER modifier '+|get': Unknown command or category name in ACL" \
            {r acl setuser sub1 +|get}
        assert_error "ERR Error in ACL SETUSER modifier '+nosuch|': Unknown command or category name in ACL" \
            {r acl setuser sub1 +nosuch|}
        assert_equal {} [r acl getuser sub1]
    }
}

# A refused AUTH costs the same whoever was named: a name nobody has was
# answered before the password was hashed, a SHA-256 sooner than a known
# user's, so a tenant could list the others' names by timing AUTH. The
# work is counted (DEBUG VISITS auth-digests), not timed.
start_server {tags {acl mooncake}} {
    test {A refused AUTH compares one digest whether the user exists, is off, has no password or not} {
        r acl setuser vis:alice on >secret ~vis:* +@all
        r acl setuser vis:off off >secret
        r acl setuser vis:nopw on resetpass
        set c [redis_client]
        set costs {}
        foreach name {vis:alice nosuchuser vis:off vis:nopw} {
            r debug visits reset
            assert_error {WRONGPASS*} {$c auth $name wrong}
            lappend costs [dict get [r debug visits] auth-digests]
        }
        assert_equal {1 1 1 1} $costs
        # HELLO AUTH too, and a right password opens as before.
        r debug visits reset
        assert_error {WRONGPASS*} {$c hello 2 auth nosuchuser wrong}
        assert_equal 1 [dict get [r debug visits] auth-digests]
        assert_equal OK [$c auth vis:alice secret]
        assert_equal vis:alice [$c acl whoami]
        $c close
    }
}

start_server {tags {acl}} {
    r acl setuser getter on >p1 ~* +get +acl|whoami
    r acl setuser safe on >p1 ~* +@all -@dangerous
    r acl setuser cfg on >p1 ~* +config|get
    r acl setuser ta on >p1 ~tenantA:* %R~ro:* %W~wo:* +@all

    test {A command the user may not run: -NOPERM, and nothing happens} {
        set c [acl_client getter p1]
        assert_equal {} [$c get k]
        assert_error {NOPERM*} {$c set k v}
        assert_error {NOPERM*} {$c del k}
        assert_equal 0 [r exists k]
        assert_equal getter [$c acl whoami]
        $c close
    }

    test {Categories: +@all -@dangerous refuses FLUSHALL, KEYS, CONFIG, DEBUG and allows the rest} {
        set c [acl_client safe p1]
        assert_equal OK [$c set k v]
        assert_equal v [$c get k]
        assert_error {NOPERM*} {$c flushall}
        assert_error {NOPERM*} {$c keys *}
        assert_error {NOPERM*} {$c config get maxmemory}
        assert_error {NOPERM*} {$c debug sleep 0}
        assert_equal 1 [r dbsize]
        $c close
    }

    test {A subcommand may be allowed alone: +config|get, not config|set} {
        set c [acl_client cfg p1]
        assert_equal 2 [llength [$c config get maxmemory]]
        assert_error {NOPERM*} {$c config set maxmemory 0}
        $c close
    }

    test {Key patterns: only the user's keys, every key of a command checked} {
        set c [acl_client ta p1]
        assert_equal OK [$c set tenantA:1 a]
        assert_equal a [$c get tenantA:1]
        assert_error {NOPERM*} {$c get tenantB:1}
        assert_error {NOPERM*} {$c set tenantB:1 x}
        assert_error {NOPERM*} {$c mget tenantA:1 tenantB:1}
        assert_error {NOPERM*} {$c del tenantA:1 other}
        assert_equal 0 [r exists tenantB:1]
        $c close
    }

    test {%R~ patterns allow reading only, %W~ patterns writing only} {
        r set ro:1 r
        set c [acl_client ta p1]
        assert_equal r [$c get ro:1]
        assert_error {NOPERM*} {$c set ro:1 x}
        assert_equal OK [$c set wo:1 w]
        assert_error {NOPERM*} {$c get wo:1}
        # SET ... GET reads the old value: it needs both.
        assert_error {NOPERM*} {$c set wo:1 x get}
        $c close
        assert_equal r [r get ro:1]
        assert_equal w [r get wo:1]
    }

    test {A %W~ key cannot be read through a write: GETDEL, GETSET, GETEX, INCR, COPY, RENAME} {
        # Each returns or moves the value, so each needs read as in Redis 7
        # (its key spec says "access"); writes that return nothing of it do not.
        r set wo:s secret
        r set wo:n 41
        set c [acl_client ta p1]
        foreach cmd {{getdel wo:s} {getset wo:s x} {getex wo:s} {getex wo:s persist} {incr wo:n}
                     {incrby wo:n 1} {decr wo:n} {incrbyfloat wo:n 1} {copy wo:s tenantA:c}
                     {rename wo:s tenantA:r} {renamenx wo:s tenantA:r}} {
            assert_error {NOPERM*} [list $c {*}$cmd]
        }
        assert_equal secret [r get wo:s]
        assert_equal 41 [r get wo:n]
        assert_equal 0 [r exists tenantA:c tenantA:r]
        # Moving a readable key into the write-only prefix, and the pure
        # writes, stay allowed.
        $c set tenantA:src v
        assert_equal OK [$c rename tenantA:src wo:moved]
        assert_equal 7 [$c append wo:s x]
        assert_equal 1 [$c expire wo:s 1000]
        assert_equal 1 [$c del wo:moved]
        # A metadata read needs a pattern of either kind, as in Redis 7.
        assert_equal 1 [$c exists wo:s]
        # A write-only producer of the store puts, publishes and pins, and
        # reads nothing back.
        lassign [lindex [$c put.start wo:p 5] 0] seg off len
        $c seg.write $seg $off hello
        assert_equal OK [$c put.end wo:p]
        assert_equal OK [$c pin wo:p 1000]
        assert_error {NOPERM*} {$c get.replicas wo:p}
        assert_error {*not inside the extent*} {$c seg.read $seg $off 5}
        assert_equal hello [r get wo:p]
        assert_equal {{wo:p {OW update}}} [r command getkeysandflags put.start wo:p 5]
        $c close
    }

    test {ACL DRYRUN says what a user could run, without running it} {
        assert_equal OK [r acl dryrun ta get tenantA:1]
        assert_match {*no permissions*} [r acl dryrun ta get tenantB:1]
        assert_match {*no permissions*} [r acl dryrun getter set k v]
        assert_error {ERR*} {r acl dryrun nosuchuser get k}
    }

    test {ACL DRYRUN names a refused channel as a channel, a refused key as a key} {
        # found by tests/helpers/redis_diff.py --acl-seeds: a channel was
        # reported as "the 'news' key"
        r acl setuser dryrunch on >pw ~k* &ok* +@all
        assert_equal {User dryrunch has no permissions to access the 'news' channel} \
            [r acl dryrun dryrunch publish news m]
        assert_equal {User dryrunch has no permissions to access the 'news' channel} \
            [r acl dryrun dryrunch subscribe ok1 news]
        assert_equal {User dryrunch has no permissions to access the 'x' key} \
            [r acl dryrun dryrunch get x]
        assert_equal OK [r acl dryrun dryrunch publish ok1 m]
        r acl deluser dryrunch
    }

    test {ACL SETUSER takes an empty rule as a no-op, as Redis} {
        # found by tests/helpers/redis_diff.py --acl-seeds: "" was a syntax
        # error that refused the whole SETUSER
        r acl setuser emptyrule on >pw {} ~e* {} +get
        assert_equal {on} [dict get [r acl getuser emptyrule] flags]
        assert_equal {~e*} [dict get [r acl getuser emptyrule] keys]
        assert_equal OK [r acl setuser emptyrule {}]
        assert_equal OK [r acl dryrun emptyrule get e1]
        r acl deluser emptyrule
    }

    test {ACL SETUSER lists a channel pattern given twice once, as Redis} {
        # found by tests/helpers/redis_diff.py --acl-seeds: "&n?ws &n?ws"
        r acl setuser dupch on >pw &n?ws &n?ws &other
        assert_equal {&n?ws &other} [dict get [r acl getuser dupch] channels]
        r acl setuser dupch &other
        assert_equal {&n?ws &other} [dict get [r acl getuser dupch] channels]
        r acl deluser dupch
    }

    test {Commands allowed before AUTH stay allowed to any user} {
        set c [acl_client getter p1]
        assert_equal OK [$c auth getter p1]
        set reply [$c hello 2]
        assert_equal 2 [dict get $reply proto]
        $c close
    }

    test {HELLO 3 AUTH user pass} {
        set c [redis_client]
        set reply [$c hello 3 AUTH ta p1]
        assert_equal 3 [dict get $reply proto]
        assert_equal ta [$c acl whoami]
        assert_error {WRONGPASS*} {$c hello 3 AUTH ta wrong}
        $c close
    } {}

    test {CLIENT LIST shows the user; CLIENT KILL USER closes its connections} {
        set c [acl_client getter p1]
        assert_match "*user=getter*" [r client list]
        assert_equal 1 [r client kill user getter]
        assert_error {*} {$c get k}
        catch {$c close}
        assert_error {ERR No such user*} {r client kill user nosuchuser}
    }

    test {RESET makes the connection the default user again} {
        set c [acl_client ta p1]
        assert_equal RESET [$c reset]
        assert_equal default [$c acl whoami]
        $c close
    }

    test {DELUSER removes users and closes their connections; default cannot be removed} {
        r acl setuser doomed on >p1 +@all ~*
        set c [acl_client doomed p1]
        assert_equal 1 [r acl deluser doomed nosuchuser]
        assert_error {*} {$c ping}
        catch {$c close}
        assert_equal {} [r acl getuser doomed]
        assert_error {ERR*default*} {r acl deluser default}
    }

    test {requirepass is the default user's password} {
        r config set requirepass p1
        assert_equal [list $::p1hash] [dict get [r acl getuser default] passwords]
        set c [redis_client]
        assert_error {NOAUTH*} {$c ping}
        assert_equal OK [$c auth default p1]
        $c close
        r config set requirepass ""
        assert_match {*nopass*} [dict get [r acl getuser default] flags]
        set c [redis_client]
        set p [$c ping]
        $c close
        set p
    } {PONG}

    test {ACL GENPASS: 256 bits by default, as many hex digits as bits / 4, rounded up} {
        assert_equal 64 [string length [r acl genpass]]
        assert_equal 8 [string length [r acl genpass 32]]
        assert_equal 2 [string length [r acl genpass 5]]
        assert {[regexp {^[0-9a-f]+$} [r acl genpass]]}
        assert_not_equal [r acl genpass] [r acl genpass]
        assert_error {ERR*} {r acl genpass 0}
        assert_error {ERR*} {r acl genpass 5000}
    }

    test {ACL CAT lists the categories, and the commands of one} {
        set cats [r acl cat]
        foreach cat {keyspace read write string admin dangerous fast slow connection} {
            assert {[lsearch -exact $cats $cat] >= 0}
        }
        set strings [r acl cat string]
        assert {[lsearch -exact $strings get] >= 0}
        assert {[lsearch -exact $strings set] >= 0}
        set dangerous [r acl cat dangerous]
        foreach cmd {flushall keys config|set debug} {
            assert {[lsearch -exact $dangerous $cmd] >= 0}
        }
        assert {[lsearch -exact [r acl cat read] set] < 0}
        assert_error {ERR*Unknown category*} {r acl cat nosuchcategory}
    }

    test {ACL CAT <category> lists subcommands, not their containers, as Redis} {
        # found by tests/helpers/redis_diff.py --acl-seeds: the containers
        # took their group's category (OBJECT in @keyspace, PUBSUB and
        # PUBSUB|HELP in @pubsub, CLIENT in @connection, SLOWLOG in @admin)
        foreach {cat cmd} {keyspace object pubsub pubsub pubsub pubsub|help connection client
                           admin slowlog dangerous slowlog} {
            assert {[lsearch -exact [r acl cat $cat] $cmd] < 0}
        }
        assert {[lsearch -exact [r acl cat keyspace] object|encoding] >= 0}
        assert {[lsearch -exact [r acl cat connection] client|id] >= 0}
        assert {[lsearch -exact [r acl cat admin] slowlog|reset] >= 0}
        # COMMAND runs bare, and Redis puts the container itself in @connection
        assert {[lsearch -exact [r acl cat connection] command] >= 0}
        assert {[lsearch -exact [r acl cat slow] object] >= 0}
    }

    test {@pubsub, @transaction and @bitmap hold their commands, and rules using them grant and deny} {
        foreach {cat cmds} {
            pubsub {subscribe psubscribe ssubscribe unsubscribe punsubscribe sunsubscribe publish spublish
                    pubsub|channels pubsub|numsub pubsub|numpat}
            transaction {multi exec discard watch unwatch}
            bitmap {setbit getbit bitcount}
        } {
            set members [r acl cat $cat]
            foreach cmd $cmds {
                assert {[lsearch -exact $members $cmd] >= 0}
            }
        }
        assert_equal {@write @bitmap @slow} [lindex [r command info setbit] 0 6]
        r acl setuser txuser on >pw ~* &* +@read +@write +@transaction -@pubsub +@connection
        set c [redis_client]
        $c auth txuser pw
        assert_equal OK [$c multi]
        assert_equal QUEUED [$c set tx:k 1]
        assert_equal {OK} [$c exec]
        assert_error {NOPERM*} {$c publish ch m}
        assert_error {NOPERM*} {$c subscribe ch}
        $c close
        r acl deluser txuser
        r del tx:k
    }

    test {COMMAND INFO shows the categories, COMMAND LIST filters by them} {
        assert_equal {@read @string @fast} [lindex [r command info get] 0 6]
        assert_equal {@write @string @slow} [lindex [r command info set] 0 6]
        set strings [r command list filterby aclcat string]
        assert {[lsearch -exact $strings get] >= 0}
        assert {[lsearch -exact $strings del] < 0}
        assert_equal {} [r command list filterby aclcat nosuchcategory]
    }
}

start_server {tags {acl}} {
    r acl setuser alice on >p1 ~tenantA:* +get +set

    test {ACL LOG records refused commands, keys and AUTHs, newest first} {
        r acl log reset
        set c [acl_client alice p1]
        catch {$c del tenantA:1}
        catch {$c get tenantB:secret}
        catch {$c auth alice wrong}
        $c close
        set log [r acl log]
        assert_equal 3 [llength $log]
        lassign $log auth key cmd
        assert_equal auth [dict get $auth reason]
        assert_equal auth [string tolower [dict get $auth object]] ;# the command, as sent
        assert_equal alice [dict get $auth username]
        assert_equal key [dict get $key reason]
        assert_equal tenantB:secret [dict get $key object]
        assert_equal toplevel [dict get $key context]
        assert_equal command [dict get $cmd reason]
        assert_equal del [dict get $cmd object]
        assert_equal 1 [dict get $cmd count]
        assert_match {*user=alice*} [dict get $cmd client-info]
        assert_match {*cmd=del*} [dict get $cmd client-info]
        assert {[dict get $cmd age-seconds] < 60}
    }

    test {ACL LOG: the same refusal again counts instead of adding an entry} {
        set c [acl_client alice p1]
        catch {$c get tenantB:secret}
        catch {$c get tenantB:secret}
        $c close
        set log [r acl log]
        assert_equal 3 [llength $log]
        assert_equal tenantB:secret [dict get [lindex $log 0] object]
        assert_equal 3 [dict get [lindex $log 0] count]
    }

    test {ACL LOG count, ACL LOG RESET and acllog-max-len} {
        assert_equal 1 [llength [r acl log 1]]
        r config set acllog-max-len 2
        set c [acl_client alice p1]
        for {set i 0} {$i < 5} {incr i} { catch {$c get other:$i} }
        $c close
        assert_equal 2 [llength [r acl log]]
        assert_equal other:4 [dict get [lindex [r acl log] 0] object]
        assert_equal OK [r acl log reset]
        assert_equal {} [r acl log]
        r config set acllog-max-len 128
    }

    # Redis 7.2's fields (7.0 has none).
    tags {mooncake} {
    test {INFO stats counts refusals by kind} {
        set a0 [s acl_access_denied_auth]
        set c0 [s acl_access_denied_cmd]
        set k0 [s acl_access_denied_key]
        set c [acl_client alice p1]
        catch {$c del tenantA:1}
        catch {$c get other}
        catch {$c get other}
        catch {$c auth alice wrong}
        $c close
        list [expr {[s acl_access_denied_auth] - $a0}] [expr {[s acl_access_denied_cmd] - $c0}] \
            [expr {[s acl_access_denied_key] - $k0}]
    } {1 1 2}
    }

    test {A wrong AUTH of the default user is logged as default} {
        r config set requirepass p1
        set c [redis_client]
        catch {$c auth wrong}
        $c close
        r auth p1
        set e [lindex [r acl log] 0]
        r config set requirepass ""
        list [dict get $e reason] [dict get $e username]
    } {auth default}
}

# ---- aclfile -------------------------------------------------------------

proc acl_write_file {path text} {
    set f [open $path w]
    puts -nonewline $f $text
    close $f
}

proc acl_read_lines {path} {
    set f [open $path r]
    set text [read $f]
    close $f
    return [split [string trim $text "\n"] "\n"]
}

set ::aclfile [tmpfile users.acl]
acl_write_file $::aclfile "user alice on #$::p1hash ~a:* +get\nuser default on nopass ~* &* +@all\n"

start_server [list tags {acl} overrides [list aclfile $::aclfile]] {
    test {The aclfile is loaded at start-up} {
        assert_equal {alice default} [r acl users]
        set c [acl_client alice p1]
        assert_equal {} [$c get a:1]
        assert_error {NOPERM*} {$c set a:1 x}
        $c close
        assert_equal $::aclfile [lindex [r config get aclfile] 1]
    }

    test {ACL SAVE writes the users as ACL LIST shows them, ACL LOAD reads them back} {
        r acl setuser bob on >p1 ~b:* %R~shared:* +set +get
        assert_equal OK [r acl save]
        assert_equal [r acl list] [acl_read_lines $::aclfile]
        set before [r acl list]
        r acl deluser bob
        r acl setuser alice +del
        assert_equal OK [r acl load]
        assert_equal $before [r acl list]
        set c [acl_client bob p1]
        assert_equal OK [$c set b:1 x]
        $c close
    }

    test {ACL SAVE quotes a name or pattern holding a quote, and ACL LOAD reads it back} {
        # sdssplitargs starts a quoted string at a quote inside a word, so
        # these were saved as lines ACL LOAD (and the next start) refused:
        # found by fuzz_config.
        r acl setuser {o'neil} on >p1 {~it's:*} {%R~say"hi:*} {&ch'an} +get
        set before [r acl list]
        assert_equal OK [r acl save]
        assert_equal OK [r acl load]
        assert_equal $before [r acl list]
        set c [acl_client {o'neil} p1]
        assert_equal {} [$c get {it's:1}]
        assert_error {NOPERM*} {$c get other}
        $c close
        r acl deluser {o'neil}
    }

    test {ACL LOAD replaces the users with the file's} {
        acl_write_file $::aclfile "user carol on #$::p1hash ~c:* +@all\nuser default on nopass ~* &* +@all\n"
        assert_equal OK [r acl load]
        assert_equal {carol default} [r acl users]
    }

    test {ACL LOAD of a bad file is refused and changes nothing} {
        set before [r acl list]
        acl_write_file $::aclfile "user dave on >p1 +@all\nuser erin on +nosuchcommand\n"
        assert_error {ERR*} {r acl load}
        acl_write_file $::aclfile "this is not a user line\n"
        assert_error {ERR*} {r acl load}
        assert_equal $before [r acl list]
    }
}
file delete $::aclfile

start_server {tags {acl}} {
    test {ACL LOAD and ACL SAVE need an aclfile} {
        assert_error {ERR*} {r acl load}
        assert_error {ERR*} {r acl save}
    }
}

# ---- what only this server has -------------------------------------------

tags {acl mooncake} {
    test {A bad aclfile stops the start, naming the line} {
        set path [tmpfile bad.acl]
        acl_write_file $path "user ok on nopass +@all ~*\nuser broken on +nosuchcommand\n"
        lassign [run_server_expecting_exit --port [find_available_port] --aclfile $path] exited out
        file delete $path
        assert_equal 1 $exited
        assert_match "*FATAL ACL FILE ERROR*bad.acl*:2:*broken*nosuchcommand*" $out
    }

    test {ACL LOG wants a positive count} {
        start_server {} {
            assert_error {ERR*} {r acl log -1}
            assert_error {ERR*} {r acl log x}
        }
    }

    test {Comments and blank lines in the aclfile are skipped} {
        set path [tmpfile comments.acl]
        acl_write_file $path "# tenants\n\n  user c on nopass +@all ~*\n"
        start_server [list overrides [list aclfile $path]] {
            assert_equal {c default} [r acl users]
        }
        file delete $path
    }

    test {A missing aclfile stops the start} {
        set path [tmpfile missing.acl]
        lassign [run_server_expecting_exit --port [find_available_port] --aclfile $path] exited out
        assert_equal 1 $exited
        assert_match "*missing.acl*" $out
    }
}

set ::aclfile [tmpfile keep.acl]
acl_write_file $::aclfile "user default on nopass ~* &* +@all\n"
start_server [list tags {acl mooncake} overrides [list aclfile $::aclfile]] {
    test {ACL LOAD keeps the connections of users that stay (with their new rules)} {
        r acl setuser stay on >p1 ~* +@all
        r acl save
        set c [acl_client stay p1]
        r acl setuser stay -get
        assert_error {NOPERM*} {$c get k}
        assert_equal OK [r acl load]
        assert_equal {} [$c get k]
        $c close
    }

    test {A file without the default user leaves default as it is} {
        r config set requirepass p1
        acl_write_file $::aclfile "user stay on >p1 ~* +@all\n"
        assert_equal OK [r acl load]
        assert_equal [list $::p1hash] [dict get [r acl getuser default] passwords]
        r config set requirepass ""
    }
}
file delete $::aclfile

start_server {tags {acl mooncake}} {
    test {The store commands are @store; SHM.ATTACH and REMOVE.ALL are @dangerous} {
        set store [r acl cat store]
        foreach cmd {put.start put.end get.replicas lease remove object.info batch.put.start mount segments
                     seg.read seg.write seg.readv seg.writev shm.attach} {
            assert {[lsearch -exact $store $cmd] >= 0}
        }
        set dangerous [r acl cat dangerous]
        assert {[lsearch -exact $dangerous shm.attach] >= 0}
        assert {[lsearch -exact $dangerous remove.all] >= 0}
        assert {[lsearch -exact $dangerous put.start] < 0}
        assert_equal {@read @slow @store} [lindex [r command info seg.read] 0 6]
    }

    test {ACL appears in COMMAND DOCS with its subcommands} {
        set docs [r command docs acl]
        assert_match {*acl|setuser*} $docs
    }
}

# Two tenants on one server: every route to bytes -- keyed commands, the
# data plane by (segment, offset), shared memory, segments -- keeps each
# inside its own prefix.
start_server {tags {acl mooncake} overrides {segment-size 4mb evict-policy noeviction}} {
    r acl setuser alice on >pa ~tenantA:* +@all
    r acl setuser bob on >pb ~tenantB:* +@all
    set ::ca [acl_client alice pa]
    set ::cb [acl_client bob pb]

    # A complete object of B's: {seg off len}.
    proc b_object {key value} {
        lassign [lindex [$::cb put.start $key [string length $value]] 0] seg off len
        $::cb seg.write $seg $off $value
        $::cb put.end $key
        return [list $seg $off $len]
    }

    test {A tenant cannot PUT.START, GET.REPLICAS, REMOVE or describe another's keys} {
        b_object tenantB:obj secretsecret
        assert_error {NOPERM*} {$::ca put.start tenantB:obj 10 REPLACE}
        assert_error {NOPERM*} {$::ca put.start tenantB:new 10}
        assert_error {NOPERM*} {$::ca get.replicas tenantB:obj}
        assert_error {NOPERM*} {$::ca object.info tenantB:obj}
        assert_error {NOPERM*} {$::ca remove tenantB:obj}
        assert_error {NOPERM*} {$::ca lease tenantB:obj 1000}
        assert_error {NOPERM*} {$::ca batch.get.replicas tenantA:x tenantB:obj}
        assert_error {NOPERM*} {$::ca batch.put.start 2 tenantA:x 10 tenantB:y 10}
        assert_error {NOPERM*} {$::ca get tenantB:obj}
        assert_equal 0 [r exists tenantA:x]
        assert_equal 0 [r exists tenantB:new]
        assert_equal secretsecret [r get tenantB:obj]
    }

    test {A tenant cannot SEG.READ another's object, even knowing its segment and offset} {
        lassign [lindex [r get.replicas tenantB:obj] 3] seg off len
        assert_equal secretsecret [$::cb seg.read $seg $off $len]
        # Refused as free space is (tenants_hidden.tcl), logged for the admin.
        assert_error {ERR range is not inside*} {$::ca seg.read $seg $off $len}
        assert_error {ERR range is not inside*} {$::ca seg.read $seg [expr {$off + 3}] 2}
        assert_error {ERR range is not inside*} {$::ca seg.readv $seg $off $len}
        set e [lindex [r acl log] 0]
        list [dict get $e reason] [dict get $e object] [dict get $e username]
    } {key tenantB:obj alice}

    test {A tenant cannot SEG.WRITE into another's pending put (small and in-place payloads)} {
        set big [string repeat B 40000]
        lassign [lindex [$::cb put.start tenantB:pending 40000] 0] seg off len
        assert_equal OK [$::cb seg.write $seg $off $big]
        set w0 [get_info_field r stats data_write_bytes]
        assert_error {ERR range is not inside*} {$::ca seg.write $seg $off XXXX}
        assert_error {ERR range is not inside*} {$::ca seg.write $seg $off [string repeat X 40000]}
        assert_error {ERR range is not inside*} {$::ca seg.writev $seg $off XXXX}
        assert_equal $w0 [get_info_field r stats data_write_bytes]
        assert_equal OK [$::cb put.end tenantB:pending]
        assert_equal $big [$::cb seg.read $seg $off 40000]
    }

    test {A tenant's own put and get over the TCP data plane work} {
        set v [string repeat "a tenant's bytes " 3000]
        set n [string length $v]
        lassign [lindex [$::ca put.start tenantA:own $n] 0] seg off len
        assert_equal OK [$::ca seg.write $seg $off $v]
        assert_equal OK [$::ca put.end tenantA:own]
        lassign [lindex [$::ca get.replicas tenantA:own] 3] seg2 off2 len2
        assert_equal $v [$::ca seg.read $seg2 $off2 $len2]
        assert_equal [list [string range $v 0 9] [string range $v 100 104]] \
            [$::ca seg.readv $seg2 $off2 10 [expr {$off2 + 100}] 5]
        assert_error {NOPERM*} {$::cb get tenantA:own}
    }

    test {A value stored with SET (no recorded key) is read with GET, not the data plane} {
        r set tenantA:plain [string repeat p 100]
        regexp {segment:(\d+) offset:(\d+)} [r debug object tenantA:plain] -> seg off
        assert_error {ERR range is not inside*} {$::ca seg.read $seg $off 100}
        assert_equal [string repeat p 100] [$::ca get tenantA:plain]
    }

    test {A tenant is refused SHM.ATTACH (the whole pool); allkeys users are not} {
        set u [acl_client alice pa 1]
        assert_error {NOPERM*SHM.ATTACH*} {$u shm.attach 1}
        $u close
        set d [redis_client_unix]
        assert_equal 2 [llength [$d shm.attach 1]]
        $d close
        assert_equal shm.attach [dict get [lindex [r acl log] 0] object]
    }

    test {SCAN and KEYS show a tenant only its keys} {
        assert_equal {} [lsearch -all -inline -not [$::ca keys *] tenantA:*]
        assert {[llength [$::ca keys *]] >= 2}
        set all {}
        set cursor 0
        while 1 {
            lassign [$::ca scan $cursor count 100] cursor keys
            lappend all {*}$keys
            if {$cursor == 0} break
        }
        assert_equal [lsort [$::ca keys *]] [lsort $all]
        assert {[llength [r keys *]] > [llength $all]}
    }

    test {Segments: a tenant's segment is its own; others do not see, use or unmount it} {
        set ida [$::ca mount tenA-seg 1mb OWNER ownerA]
        set idb [$::cb mount tenB-seg 1mb OWNER ownerB]
        set ids [r mount shared-seg 1mb OWNER admin]
        set names {}
        foreach s [$::cb segments] { lappend names [dict get $s name] }
        assert_equal {self shared-seg tenB-seg} [lsort $names]
        assert_equal {} [$::cb segment.info tenA-seg]
        assert_equal $ida [dict get [$::ca segment.info tenA-seg] id]
        assert_equal 4 [llength [r segments]]
        assert_error {ERR no such segment*} {$::cb unmount tenA-seg}
        assert_error {NOPERM*shared*} {$::ca unmount shared-seg}
        assert_error {ERR*own segment*} {$::ca unmount self}
        # Segment and owner names are per tenant: bob's tenA-seg is his own.
        set idb2 [$::cb mount tenA-seg 1mb OWNER ownerA]
        assert_not_equal $ida $idb2
        assert_equal 0 [$::cb unmount tenA-seg]
        # Owner names are per tenant: bob's ownerB is not alice's to keep
        # alive, and the name is free for an owner of her own.
        assert_error {NEEDREMOUNT*} {$::ca heartbeat ownerB}
        assert_equal OK [$::cb heartbeat ownerB]
        set ida2 [$::ca mount tenA-seg2 1mb OWNER ownerB]
        assert_equal OK [$::ca heartbeat ownerB]
        assert_equal 0 [$::ca unmount tenA-seg2]
    }

    test {Placement: a tenant segment takes only its tenant's replicas} {
        set ida [dict get [r segment.info tenA-seg] id]
        # Bob and the default user, asking for every segment, never get tenA-seg.
        foreach rep [$::cb put.start tenantB:spread 1000 REPLICAS 8] {
            assert_not_equal $ida [lindex $rep 0]
        }
        foreach rep [r put.start spread 1000 REPLICAS 8] {
            assert_not_equal $ida [lindex $rep 0]
        }
        assert_error {ERR no such segment*} {$::cb put.start tenantB:pref 1000 PREFER tenA-seg}
        # Alice may put there.
        assert_equal $ida [lindex [$::ca put.start tenantA:pref 1000 PREFER tenA-seg] 0 0]
        assert_equal 1 [$::ca unmount tenA-seg]
    }

    test {REMOVE.ALL by a tenant removes the keys it may write, and no other's} {
        $::ca remove.all ;# a clean slate: earlier tests left keys, some with TTLs
        assert_equal {} [$::ca keys *]
        $::ca set tenantA:s1 v
        $::ca put.start tenantA:p1 10
        $::ca put.end tenantA:p1
        $::ca put.start tenantA:pending 10
        $::cb set tenantB:s1 v
        r set shared:s1 v
        # two complete keys and a pending put, each counted once
        assert_equal 3 [$::ca remove.all]
        assert_equal {} [$::ca keys *]
        assert_equal 0 [$::ca exists tenantA:pending]
        assert_equal v [$::cb get tenantB:s1]
        assert_equal v [r get shared:s1]
        assert_equal 0 [$::ca remove.all]
    }

    test {PUT.START HINT: a segment a tenant may not use is passed over, not refused} {
        r mount tenA-seg2 1mb OWNER adminA
        $::cb mount tenB-own 1mb OWNER ownerB2
        set shared [dict get [r segment.info tenA-seg2] id]
        set alices [$::ca mount tenA-seg3 1mb OWNER ownerA3]
        set own [dict get [$::cb segment.info tenB-own] id]
        # tenA-seg2 is shared but hosted by a client process (mounted by the
        # default user): a hint to it, to a name that does not exist, or to
        # another tenant's segment is ignored, and the put goes where it
        # would go without hints (the pool or bob's own segments).
        foreach rep [$::cb put.start tenantB:hint 1000 HINT nonexistent HINT tenA-seg2 HINT tenA-seg3] {
            assert {[lindex $rep 0] ni [list $shared $alices]}
        }
        $::cb put.revoke tenantB:hint
        # A hint to its own segment is taken.
        assert_equal $own [lindex [$::cb put.start tenantB:hint2 1000 HINT tenA-seg2 HINT tenB-own] 0 0]
        $::cb put.revoke tenantB:hint2
        r unmount tenA-seg2
        $::cb unmount tenB-own
        $::ca unmount tenA-seg3
        assert_equal {} [r segment.info tenA-seg2]
    }

    test {A shared segment a client process hosts: no tenant is placed there or gets its token} {
        # Its host serves any range to whoever holds the token, so the token
        # would let a tenant read and overwrite the objects of every other
        # user placed there.
        r mount shared-host 8mb OWNER adminS TOKEN [string repeat ab 16] ENDPOINT rdma://127.0.0.1:7001 BASE 4096 RKEY mlx5_0:1a2b,mlx5_1:3c4d
        set sid [dict get [r segment.info shared-host] id]
        assert_equal [string repeat ab 16] [r segment.token shared-host]
        assert_equal {} [$::cb segment.token shared-host]
        assert_equal {} [$::ca segment.token shared-host]
        # Its rkeys are the same capability over RDMA (the host's QP listener
        # admits anyone): the server's users see them, a tenant sees none,
        # in SEGMENT.INFO and in SEGMENTS.
        assert_equal mlx5_0:1a2b,mlx5_1:3c4d [dict get [r segment.info shared-host] rkey]
        assert_equal {} [dict get [$::cb segment.info shared-host] rkey]
        set listed none
        foreach seg [$::ca segments] {
            if {[dict get $seg id] == $sid} { set listed [dict get $seg rkey] }
        }
        assert_equal {} $listed
        foreach seg [r segments] {
            if {[dict get $seg id] == $sid} { assert_equal mlx5_0:1a2b,mlx5_1:3c4d [dict get $seg rkey] }
        }
        # The tenant still sees it exist (its capacity), but never lands there,
        # not even when asking for every replica it can get ...
        assert_equal $sid [dict get [$::cb segment.info shared-host] id]
        foreach rep [$::cb put.start tenantB:wide 1000 REPLICAS 8] {
            assert_not_equal $sid [lindex $rep 0]
        }
        $::cb put.revoke tenantB:wide
        assert_not_equal $sid [lindex [$::cb put.start tenantB:pref 1000 PREFER shared-host] 0 0]
        $::cb put.revoke tenantB:pref
        # ... while a server user's puts still use it.
        set ids {}
        foreach rep [r put.start wide 1000 REPLICAS 8] { lappend ids [lindex $rep 0] }
        assert {[lsearch $ids $sid] >= 0}
        r put.revoke wide
        r unmount shared-host
    }

    $::ca close
    $::cb close
}

start_server {tags {acl pubsub}} {
    test {Channels: &patterns let a user subscribe and publish; others are NOPERM and logged} {
        r acl log reset
        r acl setuser news on >pw ~* +@all resetchannels &news:*
        set c [redis_client]
        $c auth news pw
        assert_equal 0 [$c publish news:1 hello]
        assert_error {NOPERM*} {$c publish sports:1 hello}
        assert_error {NOPERM*} {$c spublish sports:1 hello}
        set sub [redis_deferring_client]
        $sub auth news pw
        $sub read
        $sub subscribe news:a
        assert_equal {subscribe news:a 1} [$sub read]
        $sub subscribe sports:a
        assert_match {*NOPERM*} [catch {$sub read} e; set e]
        # A pattern must be granted literally: it stands for every channel it matches.
        $sub psubscribe news:*
        assert_equal {psubscribe news:* 2} [$sub read]
        $sub psubscribe n*
        assert_match {*NOPERM*} [catch {$sub read} e; set e]
        $sub close
        set entry [lindex [r acl log 1] 0]
        assert_equal channel [dict get $entry reason]
        assert_equal news [dict get $entry username]
        # allchannels grants them all.
        r acl setuser news allchannels
        assert_equal 0 [$c publish sports:1 hello]
        $c close
    }
}
