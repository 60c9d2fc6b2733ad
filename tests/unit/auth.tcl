# Password authentication: requirepass, AUTH (one and two arguments),
# HELLO ... AUTH, and changing the password at run time.

start_server {tags {auth}} {
    test {AUTH without a configured password is an error} {
        assert_error {ERR*} {r auth foo}
        r ping
    } {PONG}
}

start_server {tags {auth} overrides {requirepass foobar}} {
    test {Commands before AUTH are refused} {
        assert_error {NOAUTH Authentication required*} {r ping}
        assert_error {NOAUTH Authentication required*} {r set a b}
        assert_error {NOAUTH Authentication required*} {r get a}
        assert_error {NOAUTH Authentication required*} {r config get maxclients}
    }

    test {AUTH with a wrong password} {
        assert_error {WRONGPASS invalid username-password pair or user is disabled.*} {r auth wrong}
        assert_error {NOAUTH*} {r ping}
    }

    test {AUTH with the right password} {
        assert_equal OK [r auth foobar]
        assert_equal OK [r set a b]
        r get a
    } {b}

    test {AUTH with the default user name} {
        set c [redis_client]
        assert_error {WRONGPASS*} {$c auth default wrong}
        assert_error {WRONGPASS*} {$c auth someone-else foobar}
        assert_equal OK [$c auth default foobar]
        set v [$c get a]
        $c close
        set v
    } {b}

    test {AUTH arity} {
        assert_error {ERR wrong number of arguments for 'auth' command*} {r auth}
        assert_error {ERR*} {r auth a b c}
    }

    test {HELLO before AUTH is refused} {
        set c [redis_client]
        assert_error {NOAUTH*} {$c hello 3}
        $c close
    }

    test {HELLO 3 AUTH authenticates and switches protocol} {
        set c [redis_client]
        set reply [$c hello 3 AUTH default foobar]
        assert_equal 3 [dict get $reply proto]
        assert_equal b [$c get a]
        $c get nokey
        assert_equal {_} [$c lastheader]
        $c close
    }

    test {HELLO 3 AUTH with a wrong password} {
        set c [redis_client]
        assert_error {WRONGPASS*} {$c hello 3 AUTH default wrong}
        assert_error {NOAUTH*} {$c ping}
        $c close
    }

    test {HELLO 2 AUTH SETNAME} {
        set c [redis_client]
        $c hello 2 AUTH default foobar SETNAME authed
        set n [$c client getname]
        $c close
        set n
    } {authed}

    test {The unix socket needs AUTH too} {
        set c [redis_client_unix]
        assert_error {NOAUTH*} {$c ping}
        assert_equal OK [$c auth foobar]
        set p [$c ping]
        $c close
        set p
    } {PONG}

    test {CONFIG SET requirepass at run time} {
        assert_equal OK [r config set requirepass newpass]
        # The connection that changed it stays authenticated.
        assert_equal PONG [r ping]
        set c [redis_client]
        assert_error {NOAUTH*} {$c ping}
        assert_error {WRONGPASS*} {$c auth foobar}
        assert_equal OK [$c auth newpass]
        assert_equal PONG [$c ping]
        $c close
    }

    test {CONFIG SET requirepass "" turns authentication off} {
        r config set requirepass ""
        set c [redis_client]
        set p [$c ping]
        $c close
        set p
    } {PONG}
}

start_server {tags {auth}} {
    test {A password with a zero byte is the whole password, not what comes before it} {
        set pass "abc\x00def"
        assert_equal OK [r config set requirepass $pass]
        assert_equal [list requirepass $pass] [r config get requirepass]
        set c [redis_client]
        assert_error {WRONGPASS*} {$c auth abc}
        assert_error {NOAUTH*} {$c ping}
        assert_error {WRONGPASS*} {$c auth "abc\x00de"}
        assert_equal OK [$c auth $pass]
        assert_equal PONG [$c ping]
        $c close
    }

    test {... and survives CONFIG REWRITE and a restart} {
        assert_equal OK [r config rewrite]
        restart_server
        assert_error {NOAUTH*} {r ping}
        assert_error {WRONGPASS*} {r auth abc}
        assert_equal OK [r auth "abc\x00def"]
        assert_equal PONG [r ping]
        r config set requirepass ""
    }
}

start_server {tags {auth} overrides {requirepass "with space"}} {
    test {A password with a space, quoted in the config file} {
        assert_error {NOAUTH*} {r ping}
        assert_equal OK [r auth "with space"]
        r ping
    } {PONG}
}

tags {auth} {
    test {protected-mode refuses non-loopback clients without a password} {
        skip "needs a non-loopback address to connect from"
    }
}
