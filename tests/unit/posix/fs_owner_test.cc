// Tests for the owner of a confined host file system (server/posix/fs.c):
// what an instance opened with an owner creates is that owner's, and the
// tree walk that gives a whole workspace to its uid never follows a
// symlink out nor hands over what may stand for something outside (a
// second link to a host file, a device).
//
// The fixture is the corpus tree (tests/corpus: symlinks out of the
// workspace, a hard link to a file outside, a device, a FIFO, a socket)
// next to an `outside/` tree whose owners must never change.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/base/errors.h"
#include "server/posix/fs.h"
#include "server/vfs/vfs.h"
}

#include "tests/corpus/corpus.h"

namespace fs = std::filesystem;

namespace
{

// An id no account has: chown to it needs CAP_CHOWN over it.
constexpr uid_t kUid = 3000123;
constexpr gid_t kGid = 3000124;

std::string TestTmp()
{
    const char *t = getenv("TEST_TMPDIR");
    return t && *t ? t : "/tmp";
}

// "uid:gid" of every entry under root (root included), never following.
std::map<std::string, std::string> Owners(const std::string &root)
{
    std::map<std::string, std::string> out;
    struct stat st;
    if (lstat(root.c_str(), &st) == 0)
        out["."] = std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid);
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
        std::string p = it->path().string();
        if (lstat(p.c_str(), &st) == 0)
            out[p.substr(root.size() + 1)] =
                std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid);
    }
    return out;
}

std::string OwnerOf(const std::string &path)
{
    struct stat st;
    if (lstat(path.c_str(), &st) != 0)
        return std::string("lstat: ") + strerror(errno);
    return std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid);
}

const std::string kOwner = std::to_string(kUid) + ":" + std::to_string(kGid);

class PosixFsOwner : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        if (geteuid() != 0)
            GTEST_SKIP() << "giving files to another uid needs root";
        std::string tmpl = TestTmp() + "/posixfs-owner.XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        ASSERT_NE(mkdtemp(buf.data()), nullptr);
        base_ = buf.data();
        ws_ = base_ + "/ws";
        outside_ = base_ + "/outside";
        have_chardev_ = wscorpus::BuildFixture(ws_, outside_);
        outside_owners_ = Owners(outside_);
        // In a user namespace that maps uid 0 alone, no chown to another
        // uid can work.
        std::string probe = base_ + "/probe";
        ASSERT_EQ(mkdir(probe.c_str(), 0700), 0);
        int r = chown(probe.c_str(), kUid, kGid);
        rmdir(probe.c_str());
        if (r != 0)
            GTEST_SKIP() << "chown to another uid fails here: " << strerror(errno);
    }

    void TearDown() override
    {
        if (!base_.empty()) {
            EXPECT_EQ(Owners(outside_), outside_owners_)
                << "an owner outside the workspace changed";
            std::error_code ec;
            fs::remove_all(base_, ec);
        }
    }

    struct ws_vfs *Open(unsigned flags, uid_t uid, gid_t gid)
    {
        struct ws_vfs *v = nullptr;
        EXPECT_EQ(ws_posixfs_open_owned(AT_FDCWD, ws_.c_str(), flags, uid, gid, &v), 0);
        return v;
    }

    static int Write(struct ws_vfs *v, const std::string &path, const std::string &data,
                     bool parents = false)
    {
        struct ws_write_opts o = {};
        o.create_parents = parents;
        struct ws_vfs_writer *w = nullptr;
        int r = v->ops->write_begin(v, path.c_str(), &o, &w);
        if (r < 0)
            return r;
        r = v->ops->write(w, data.data(), data.size());
        if (r < 0) {
            v->ops->write_abort(w);
            return r;
        }
        struct ws_stat st;
        return v->ops->write_commit(w, &st);
    }

    std::string base_, ws_, outside_;
    bool have_chardev_ = false;
    std::map<std::string, std::string> outside_owners_;
};

// A WriteFile-style write (O_TMPFILE, and the named temp file fallback),
// its parents, and MakeDir with and without parents: each new file and
// directory is the owner's. Replacing a file keeps the old file's owner.
TEST_F(PosixFsOwner, WhatItCreatesIsTheOwners)
{
    for (unsigned flags : {0u, unsigned(WS_POSIXFS_NO_TMPFILE)}) {
        SCOPED_TRACE(flags ? "named temp file" : "O_TMPFILE");
        std::string p = flags ? "named" : "tmpfile";
        struct ws_vfs *v = Open(flags, kUid, kGid);
        ASSERT_NE(v, nullptr);
        ASSERT_EQ(Write(v, p + ".txt", "data"), 0);
        ASSERT_EQ(Write(v, p + "-a/b/c.txt", "deep", true), 0);
        ASSERT_EQ(v->ops->mkdir(v, (p + "-m").c_str(), false, 0700), 0);
        ASSERT_EQ(v->ops->mkdir(v, (p + "-x/y/z").c_str(), true, 0755), 0);
        for (const std::string rel :
             {".txt", "-a", "-a/b", "-a/b/c.txt", "-m", "-x", "-x/y", "-x/y/z"})
            EXPECT_EQ(OwnerOf(ws_ + "/" + p + rel), kOwner) << p + rel;
        // What a symlink leads to is never created nor given away.
        EXPECT_EQ(Write(v, "abs_out/new", "no", true), -EXDEV);
        EXPECT_EQ(v->ops->mkdir(v, "abs_out/new", true, 0755), -EXDEV);
        EXPECT_EQ(v->ops->mkdir(v, "abs_out", false, 0755), -EEXIST);
        EXPECT_EQ(Write(v, "in_dir/through", "inside", false), 0);
        EXPECT_EQ(OwnerOf(ws_ + "/dir/through"), kOwner);
        v->ops->destroy(v);
        EXPECT_TRUE(wscorpus::TempFiles(ws_).empty());
    }
    // The fixture's file is root's: its new content keeps that owner.
    struct ws_vfs *v = Open(0, kUid, kGid);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(OwnerOf(ws_ + "/file"), "0:0");
    ASSERT_EQ(Write(v, "file", "replaced"), 0);
    EXPECT_EQ(wscorpus::ReadAll(ws_ + "/file"), "replaced");
    EXPECT_EQ(OwnerOf(ws_ + "/file"), "0:0");
    // And the owner's own file stays the owner's.
    ASSERT_EQ(Write(v, "tmpfile.txt", "again"), 0);
    EXPECT_EQ(OwnerOf(ws_ + "/tmpfile.txt"), kOwner);
    v->ops->destroy(v);
}

// Without an owner everything created is the server's, as before.
TEST_F(PosixFsOwner, WithoutAnOwnerTheServerKeepsIt)
{
    struct ws_vfs *v = Open(0, (uid_t)-1, (gid_t)-1);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(Write(v, "a/b.txt", "data", true), 0);
    ASSERT_EQ(v->ops->mkdir(v, "m", false, 0755), 0);
    for (const char *rel : {"a", "a/b.txt", "m"})
        EXPECT_EQ(OwnerOf(ws_ + "/" + rel), "0:0") << rel;
    v->ops->destroy(v);
}

// The walk gives the workspace's own entries to the uid, symlinks
// themselves included, and nothing they point at; a second link to a file
// (here one outside) and a device stay as they are.
TEST_F(PosixFsOwner, ChownTreeNeverFollowsASymlinkOut)
{
    auto before = Owners(ws_);
    int dfd = open(ws_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dfd, 0);
    ASSERT_EQ(ws_posixfs_chown_tree(dfd, kUid, kGid), 0);
    close(dfd);
    auto after = Owners(ws_);
    ASSERT_EQ(after.size(), before.size());
    std::vector<std::string> kept = {"hardlink_out", "pair_a", "pair_b"};
    if (have_chardev_)
        kept.push_back("chardev");
    for (const auto &[rel, owner] : after) {
        bool keep = std::find(kept.begin(), kept.end(), rel) != kept.end();
        EXPECT_EQ(owner, keep ? before[rel] : kOwner) << rel;
    }
    // The symlinks out were there and are the uid's now, not their targets.
    EXPECT_EQ(after["abs_out"], kOwner);
    EXPECT_EQ(after["abs_out_file"], kOwner);
    EXPECT_EQ(after["dir/upup"], kOwner);
    EXPECT_EQ(OwnerOf(outside_ + "/canary"), "0:0");
    EXPECT_EQ(OwnerOf(base_), "0:0");
}

} // namespace
